"""`yggc serve`: flags, the missing-extra message, a taken port, and the quiet uvicorn it starts."""
import socket
import sys

import pytest

from yggc.cli.main import build_parser, main


def run(capsys, *argv):
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_flags_and_defaults():
    args = build_parser().parse_args(["serve", "b"])
    assert (args.host, args.port, args.queue, args.api_key, args.alias) == ("127.0.0.1", 8080, 8, None, None)
    args = build_parser().parse_args(["serve", "b", "--port", "0", "--queue", "2", "--api-key", "k", "-a", "m"])
    assert (args.port, args.queue, args.api_key, args.alias) == (0, 2, "k", "m")
    assert (args.header_timeout, args.body_timeout) == (10.0, 30.0)
    for bad in (["--port", "70000"], ["--queue", "0"], ["--header-timeout", "0"], ["--body-timeout", "-1"],
                ["--body-timeout", "inf"], ["--header-timeout", "x"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", "b", *bad])


def test_without_the_serve_extra_one_line_and_exit_2(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "fastapi", None)  # `import fastapi` raises ImportError
    code, out, err = run(capsys, "serve", "some.bundle")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == ["yggc serve needs the serve extra: pip install 'yggc[serve]'"]


def test_missing_bundle_is_one_line(capsys, tmp_path):
    pytest.importorskip("fastapi")
    code, _, err = run(capsys, "serve", str(tmp_path / "nope"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("flags, env", [(["--api-key", ""], {}), ([], {"YGGC_API_KEY": ""}),
                                       (["--api-key", " "], {"YGGC_API_KEY": "k"}), (["--api-key", ""], {"YGGC_API_KEY": "k"})])
def test_an_empty_api_key_is_refused_before_the_bundle_loads(capsys, monkeypatch, tmp_path, flags, env):
    """An empty key would turn authentication off without a word (issue 82): one line, exit 2."""
    pytest.importorskip("fastapi")
    from yggc.runtime.runtime import Runtime

    monkeypatch.setattr(Runtime, "load", classmethod(lambda cls, path: pytest.fail("the bundle was loaded")))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, out, err = run(capsys, "serve", str(tmp_path), *flags)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "the API key is empty" in err and "unset YGGC_API_KEY" in err


@pytest.fixture
def fake_load(monkeypatch, demo_runtime, tmp_path):
    """Runtime.load returns the eager demo runtime; the 'bundle' is an empty folder with a manifest file."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from yggc.runtime.runtime import Runtime

    monkeypatch.setattr(Runtime, "load", classmethod(lambda cls, path: demo_runtime))
    bundle = tmp_path / "demo.bundle"
    bundle.mkdir()
    (bundle / "manifest.json").write_text("{}")
    return bundle


def test_a_taken_port_is_one_line(capsys, fake_load):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        code, _, err = run(capsys, "serve", str(fake_load), "--port", str(taken.getsockname()[1]))
    assert code == 2 and "cannot listen on 127.0.0.1:" in err and "--port" in err and len(err.splitlines()) == 1


def test_serve_starts_quiet_uvicorn_with_one_startup_line(capsys, fake_load, monkeypatch):
    import uvicorn

    started = {}

    def fake_run(self, sockets=None):
        started["config"], started["port"] = self.config, sockets[0].getsockname()[1]
        sockets[0].close()

    monkeypatch.setattr(uvicorn.Server, "run", fake_run)
    code, out, err = run(capsys, "serve", str(fake_load), "--port", "0", "--api-key", "k", "--header-timeout", "2.5",
                         "--body-timeout", "7")
    config = started["config"]
    assert code == 0 and out == "" and config.access_log is False and config.log_level == "warning"
    limits = config.http.keywords["limits"]  # uvicorn's h11 with the request limits (yggc.serve.protocol)
    assert (limits.header_timeout_s, limits.body_timeout_s, limits.max_url_bytes) == (2.5, 7.0, 8192)
    lines = [line for line in err.splitlines() if not line.startswith("yggc: warning:")]  # a busy machine's
    assert lines == ["yggc: serving 'demo.bundle' (greedy: tree D=3 W=2 V=5 + suffix branches; T > 0: tree D=3 W=2 "
                     f"V=5, the greedy plan's, unpriced) at http://127.0.0.1:{started['port']}/v1 (queue 8, API key "
                     "required); Ctrl-C stops"]
    code, _, err = run(capsys, "serve", str(fake_load), "--port", "0", "--api-key", "k", "--no-suffix")
    assert code == 0 and "(greedy: tree D=3 W=2 V=5; T > 0: tree D=3 W=2 V=5, the greedy plan's, unpriced) at" in err


@pytest.mark.parametrize("verdict, sampled", [(True, "tree D=1 W=1 V=1"),
                                              (False, "autoregressive (the plan's verdict)")])
def test_the_startup_line_names_the_sampling_plan(capsys, fake_load, monkeypatch, demo_runtime, verdict, sampled):
    import uvicorn

    from yggc.plan.shape import TreeShape

    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: sockets[0].close())
    monkeypatch.setattr(demo_runtime, "sampling_plan", (TreeShape(1, 1, 1), verdict))
    code, _, err = run(capsys, "serve", str(fake_load), "--port", "0")
    assert code == 0 and f"(greedy: tree D=3 W=2 V=5 + suffix branches; T > 0: {sampled}) at" in err
