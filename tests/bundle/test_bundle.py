"""Graph bundles: atomic writing, and one clear line for every way a bundle can be wrong."""
import json
import os
import signal
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file
from yggc.passes.write_bundle import BundleWriter, clean_stale_partials

from yggc import __version__
from yggc.bundle import (
    FORMAT_VERSION,
    BucketSpec,
    Manifest,
    OptLevel,
    environment,
    file_sha256,
    load_manifest,
    model_hashes,
    passes_hash,
    validate_bundle,
)
from yggc.errors import YggcError

FIX = "re-run `yggc compile`"
ARTIFACT = "artifacts/verify_w9.pt2"


def make_model_dir(path, vocab, sharded=False):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": vocab}))
    (path / "tokenizer.json").write_text("{}")
    (path / "README.md").write_text("not copied")
    weights = {"embed": torch.arange(vocab * 4, dtype=torch.float32).reshape(vocab, 4)}
    if sharded:
        save_file({"a": weights["embed"][:2].clone()}, str(path / "model-00001-of-00002.safetensors"))
        save_file({"b": weights["embed"][2:].clone()}, str(path / "model-00002-of-00002.safetensors"))
        (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    else:
        save_file(weights, str(path / "model.safetensors"))
    return path


FIELDS = {"device": "cpu", "dtype": "float32", "max_seq": 64, "extra": {"note": "test"},
          "buckets": [{"name": "verify_w9", "model": "verifier", "kind": "verify", "width": 9, "file": ARTIFACT}]}


def write_bundle(tmp_path, out=None, overwrite=False, fields=FIELDS, sharded=False):
    src = tmp_path / "src"
    if not src.exists():
        make_model_dir(src / "verifier", 11, sharded)
        make_model_dir(src / "drafter", 11)
    out = out or tmp_path / "bundle"
    with BundleWriter(out, overwrite=overwrite) as w:
        w.copy_model_dir(src / "verifier", "verifier")
        w.copy_model_dir(src / "drafter", "drafter")
        w.path(ARTIFACT).write_bytes(os.urandom(256))
        w.write_json("profile.json", {"verify": [1.0, 2.0]})
        w.write_json("plan.json", {"stages": []})
        w.finish(fields)
    return out, w.manifest


def leftovers(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir() if ".partial-" in p.name or ".old-" in p.name)


def expect(path, *needles, device=None):
    with pytest.raises(YggcError) as e:
        validate_bundle(path, device=device)
    msg = str(e.value)
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg, msg
    return msg


def edit_manifest(path, **changes):
    raw = json.loads((path / "manifest.json").read_text())
    raw.update(changes)
    (path / "manifest.json").write_text(json.dumps(raw))


# ---- writing ------------------------------------------------------------------------------------

def test_round_trip(tmp_path):
    out, written = write_bundle(tmp_path)
    assert validate_bundle(out) == written == load_manifest(out)
    raw = json.loads((out / "manifest.json").read_text())
    assert next(iter(raw)) == "format_version" and raw["format_version"] == FORMAT_VERSION
    env = environment("cpu", "float32")
    assert {k: raw[k] for k in env} == env
    assert written.yggc_version == __version__ and written.torch_version == torch.__version__
    assert written.passes_hash == passes_hash() and len(written.passes_hash) == 64
    assert [b.to_json() for b in written.buckets] == FIELDS["buckets"] == raw["buckets"]
    assert written.buckets == [BucketSpec("verify_w9", "verifier", "verify", 9, ARTIFACT)]
    assert written.extra == {"note": "test"} and written.created and written.opt == OptLevel.O1 == "O1"
    assert sorted(written.files) == [ARTIFACT, "drafter/config.json", "drafter/model.safetensors",
                                     "drafter/tokenizer.json", "plan.json", "profile.json", "verifier/config.json",
                                     "verifier/model.safetensors", "verifier/tokenizer.json"]
    assert written.files[ARTIFACT] == file_sha256(out / ARTIFACT)
    assert written.models["verifier"] == model_hashes(tmp_path / "src" / "verifier")
    assert leftovers(tmp_path) == []


def test_every_file_is_as_readable_as_the_manifest(tmp_path):
    """safetensors' save_file writes 0600 files (the kept embedding, the predictor): the writer gives every file
    the mode a new file gets, so a bundle compiled by one user can be served by another."""
    src = tmp_path / "src"
    make_model_dir(src / "verifier", 11)
    make_model_dir(src / "drafter", 11)
    with BundleWriter(tmp_path / "bundle") as w:
        w.copy_model_dir(src / "verifier", "verifier")
        w.copy_model_dir(src / "drafter", "drafter")
        save_file({"w": torch.zeros(2)}, str(w.path("verifier/embedding/t.safetensors")))
        w.finish(FIELDS | {"buckets": []})
    modes = {p.relative_to(tmp_path).as_posix(): p.stat().st_mode & 0o777
             for p in (tmp_path / "bundle").rglob("*") if p.is_file()}
    assert set(modes.values()) == {modes["bundle/manifest.json"]}, modes


def test_sharded_model_and_partial_manifest(tmp_path):
    out, written = write_bundle(tmp_path, fields=Manifest(device="cpu", dtype="float32", max_seq=32), sharded=True)
    assert (out / "verifier" / "model.safetensors.index.json").exists()
    assert written.models["verifier"] == model_hashes(tmp_path / "src" / "verifier")
    assert written.buckets == [] and validate_bundle(out) == written


def test_exception_inside_with_leaves_nothing(tmp_path):
    for exc in (RuntimeError("boom"), KeyboardInterrupt()):
        with pytest.raises(type(exc)), BundleWriter(tmp_path / "bundle") as w:
            w.write_json("profile.json", {})
            raise exc
        assert not (tmp_path / "bundle").exists() and leftovers(tmp_path) == []


def test_requested_stop_commits_nothing_even_when_the_interrupt_was_dropped(tmp_path, monkeypatch):
    """A SIGTERM's KeyboardInterrupt can be swallowed inside a GC callback; the stop request still holds."""
    from yggc.passes import write_bundle as wb

    monkeypatch.setattr(wb, "_stop_requested", False)
    with pytest.raises(KeyboardInterrupt), BundleWriter(tmp_path / "bundle") as w:
        w.write_json("profile.json", {})
        wb.request_stop()  # the handler ran; its interrupt never reached this frame
        assert leftovers(tmp_path) == []  # the partial directory went with the request, before any unwinding
        w.write_json("profile.json", {})  # work that goes on until the next step's check writes a new one
    assert not (tmp_path / "bundle").exists() and leftovers(tmp_path) == []
    with pytest.raises(KeyboardInterrupt), BundleWriter(tmp_path / "bundle") as w:
        target = w.path("artifacts/verifier.pt2")  # a path taken before the request
        wb.request_stop()
        target.write_bytes(b"x")  # its directory is gone: the error surfaces as the interrupt it follows from
    assert leftovers(tmp_path) == []


def test_bad_finish_leaves_nothing(tmp_path):
    with pytest.raises(ValueError, match="finish"), BundleWriter(tmp_path / "bundle") as w:
        w.write_json("profile.json", {})  # finish() never called
    with pytest.raises(YggcError, match="max_seq"):
        write_bundle(tmp_path, fields={"device": "cpu", "dtype": "float32"})
    with pytest.raises(ValueError, match="torch_version"):
        write_bundle(tmp_path, fields={**FIELDS, "torch_version": "1.0"})
    assert not (tmp_path / "bundle").exists() and leftovers(tmp_path) == []


def test_sigkill_midway_leaves_no_bundle_and_partial_is_cleaned(tmp_path):
    out = tmp_path / "bundle"
    script = ("import sys, time\nfrom yggc.passes.write_bundle import BundleWriter\n"
              "with BundleWriter(sys.argv[1]) as w:\n"
              "    w.write_json('profile.json', {})\n    print('ready', flush=True)\n    time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert not out.exists()
    stale = leftovers(tmp_path)
    assert stale == [p.name for p in clean_stale_partials(out)] and len(stale) == 1
    assert stale[0].startswith(f".bundle.partial-{proc.pid}-") and leftovers(tmp_path) == []
    write_bundle(tmp_path)  # the next compile is not disturbed


def test_swap_interrupted_by_sigkill_puts_old_bundle_back(tmp_path):
    out, first = write_bundle(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    os.rename(out, tmp_path / f".bundle.old-{pid}-0badc0de")  # as if killed between the two renames
    (tmp_path / f".bundle.partial-{pid}-0badc0de").mkdir()
    assert [p.name for p in clean_stale_partials(out)] == [f".bundle.partial-{pid}-0badc0de"]
    assert validate_bundle(out) == first and leftovers(tmp_path) == []


def test_live_partials_are_kept(tmp_path):
    with pytest.raises(RuntimeError), BundleWriter(tmp_path / "bundle") as w:
        assert clean_stale_partials(tmp_path / "bundle") == [] and w.root.exists()  # our own pid is alive
        raise RuntimeError("stop")
    assert leftovers(tmp_path) == []


def test_overwrite(tmp_path):
    out, first = write_bundle(tmp_path)
    with pytest.raises(YggcError, match="already exists"):
        write_bundle(tmp_path)
    assert validate_bundle(out) == first
    _, second = write_bundle(tmp_path, overwrite=True, fields={**FIELDS, "max_seq": 128})
    assert validate_bundle(out) == second and second.max_seq == 128 and leftovers(tmp_path) == []
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "thesis.txt").write_text("precious")
    with pytest.raises(YggcError, match="not a yggc bundle; refusing"):
        write_bundle(tmp_path, out=foreign, overwrite=True)
    assert (foreign / "thesis.txt").read_text() == "precious" and leftovers(tmp_path) == []


def test_copy_model_dir_rejects_non_checkpoints(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(YggcError, match="needs config.json"), BundleWriter(tmp_path / "bundle") as w:
        w.copy_model_dir(tmp_path / "empty", "verifier")
    with pytest.raises(ValueError), BundleWriter(tmp_path / "bundle") as w:
        w.path("../escape.json")
    assert leftovers(tmp_path) == [] and not (tmp_path / "bundle").exists()


# ---- validating ---------------------------------------------------------------------------------

@pytest.fixture
def bundle(tmp_path):
    return write_bundle(tmp_path)[0]


@pytest.mark.parametrize("field,value,needles", [
    ("format_version", 2, ["format_version 2", f"reads format_version {FORMAT_VERSION}"]),
    ("yggc_version", "0.0.1", ["yggc 0.0.1", f"this is yggc {__version__}"]),
    ("torch_version", "2.12.0", ["torch 2.12.0", f"this is torch {torch.__version__}"]),
    ("isa", "x86_64:bogus", ["isa x86_64:bogus", "this machine has isa " + environment("cpu", "float32")["isa"]]),
    ("passes_hash", "ab" * 32, ["compile passes abababababab", "passes hash to " + passes_hash()[:12]]),
])
def test_environment_mismatch(bundle, field, value, needles):
    edit_manifest(bundle, **{field: value})
    msg = expect(bundle, *needles, "on this machine")
    assert msg.endswith(f"{FIX} on this machine")


def test_device_mismatch(bundle):
    expect(bundle, "compiled for device cpu but this run uses device cuda", FIX, device="cuda")
    edit_manifest(bundle, device="cuda")
    expect(bundle, "compiled for device cuda but this run uses device cpu", FIX, device="cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_bundle_without_gpu(bundle):
    edit_manifest(bundle, device="cuda")
    expect(bundle, "compiled for device cuda but this machine has no CUDA device", FIX)


@pytest.mark.parametrize("rel", ["verifier/model.safetensors", "drafter/config.json", ARTIFACT, "profile.json"])
def test_missing_file(bundle, rel):
    (bundle / rel).unlink()
    expect(bundle, f"bundle file {rel} is missing", FIX)


@pytest.mark.parametrize("rel", ["verifier/model.safetensors", "drafter/tokenizer.json", ARTIFACT, "profile.json"])
def test_corrupted_file(bundle, rel):
    data = bytearray((bundle / rel).read_bytes())
    data[len(data) // 2] ^= 1
    (bundle / rel).write_bytes(bytes(data))
    expect(bundle, f"bundle file {rel} is corrupted (sha256 mismatch)", FIX)


def test_stray_artifact(bundle):
    (bundle / "artifacts" / "evil.pt2").write_bytes(b"x")
    expect(bundle, "bundle file artifacts/evil.pt2 is not listed in manifest.json")


def test_not_a_bundle(tmp_path):
    expect(tmp_path / "nope", "nope is not a yggc bundle: no such directory")
    (tmp_path / "file").write_text("x")
    expect(tmp_path / "file", "is not a yggc bundle: it is a file")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("x")
    expect(tmp_path / "home", "home is not a yggc bundle: it has no manifest.json", "yggc compile")


@pytest.mark.parametrize("text", ['{"name": "webapp", "format_version": 1}', '{"version": 3}', "[1, 2]"])
def test_foreign_manifest(tmp_path, text):
    (tmp_path / "manifest.json").write_text(text)
    expect(tmp_path, "is not a yggc manifest (its first field is not format_version")


def test_damaged_manifest(bundle):
    (bundle / "manifest.json").write_text('{"format_version": 1, ')
    expect(bundle, "manifest.json is not readable JSON", FIX)


@pytest.mark.parametrize("change,needle", [
    ({"max_seq": "64"}, "field 'max_seq' is '64', not an integer > 1"),
    ({"dtype": "float16"}, "field 'dtype' is 'float16'"),
    ({"surprise": 1}, "unknown field 'surprise'"),
    ({"buckets": [{"name": "verify_w9", "model": "verifier", "kind": "forward", "width": 9,
                   "file": "artifacts/other.pt2"}]}, "bucket 'verify_w9' names file"),
    ({"buckets": [{"name": "verify_w9", "file": ARTIFACT}]}, "field 'buckets' is"),  # no model, kind or width
    ({"buckets": [{"name": "v", "model": "verifier", "kind": "forward", "width": 9, "shards": 2}]}, "field 'buckets'"),
    ({"extra": {"opt": "O3"}}, "field 'extra' is {\"opt\": \"O3\"}, not an object (its \"opt\", where given"),
    ({"files": {"../outside": "0" * 64}}, "'../outside', which is not a path inside the bundle"),
])
def test_inconsistent_manifest(bundle, change, needle):
    edit_manifest(bundle, **change)
    expect(bundle, needle, "edited or damaged", FIX)


def test_missing_manifest_field_and_model_hash(bundle):
    raw = json.loads((bundle / "manifest.json").read_text())
    raw["models"]["drafter"]["sha256"] = "0" * 64
    (bundle / "manifest.json").write_text(json.dumps(raw))
    expect(bundle, "models.drafter does not match the drafter/ files")
    del raw["isa"]
    (bundle / "manifest.json").write_text(json.dumps(raw))
    expect(bundle, "missing field 'isa'")


O2_FIELDS = {**FIELDS, "extra": {"opt": "O2"},
             "buckets": [{"name": f"{m}_w1", "model": m, "kind": "forward", "width": 1, "file": ARTIFACT}
                         for m in ("verifier", "drafter")]}


def write_weightless(tmp_path, fields):
    src = tmp_path / "src"
    make_model_dir(src / "verifier", 11)
    make_model_dir(src / "drafter", 11)
    with BundleWriter(tmp_path / "bundle") as w:
        for name in ("verifier", "drafter"):
            w.copy_model_dir(src / name, name, weights=False)
        w.path(ARTIFACT).write_bytes(os.urandom(256))
        w.finish(fields)
    return tmp_path / "bundle", w.manifest


def test_weights_may_live_only_in_o2_packages(tmp_path):
    out, manifest = write_weightless(tmp_path, O2_FIELDS)
    assert not list(out.rglob("*.safetensors")) and (out / "verifier" / "config.json").is_file()
    assert manifest.models["verifier"] == model_hashes(tmp_path / "src" / "verifier")  # the checkpoint's hashes
    assert validate_bundle(out).models == manifest.models and manifest.opt == OptLevel.O2


def test_weightless_model_without_a_package_is_refused(tmp_path):
    with pytest.raises(YggcError, match="lists no verifier/config.json or no verifier/\\*.safetensors"):
        write_weightless(tmp_path, FIELDS)
    assert leftovers(tmp_path) == []
