"""The package cache: keyed by everything a package's bytes depend on, checked on the way out, bounded in size."""
import os

import torch
from yggc.passes import package_cache
from yggc.passes.package_cache import PackageCache, program_key

from yggc.artifacts.constants_map import constants_path


class Scale(torch.nn.Module):
    def __init__(self, seed: int):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        with torch.no_grad():
            self.proj.weight.copy_(torch.randn(4, 4, generator=torch.Generator().manual_seed(seed)))
            self.proj.bias.zero_()

    def forward(self, x):  # x [W, 4]
        return self.proj(x) * 2


def exported(seed: int = 0, width: int = 2):
    return torch.export.export(Scale(seed), (torch.zeros(width, 4),))


def test_the_key_follows_the_program_the_settings_and_the_weights_the_package_holds():
    key = program_key(exported(), {"freezing": True}, "cpu", weights_inside=True)
    assert program_key(exported(), {"freezing": True}, "cpu", weights_inside=True) == key  # exported again
    assert program_key(exported(width=3), {"freezing": True}, "cpu", weights_inside=True) != key
    assert program_key(exported(), {"freezing": False}, "cpu", weights_inside=True) != key
    assert program_key(exported(seed=1), {"freezing": True}, "cpu", weights_inside=True) != key
    with torch._inductor.config.patch({"cpp.enable_kernel_profile": True}):  # a global setting
        assert program_key(exported(), {"freezing": True}, "cpu", weights_inside=True) != key
    torch.set_num_threads(2)  # Inductor splits a CPU package's kernels for the threads it compiles on
    assert program_key(exported(), {"freezing": True}, "cpu", weights_inside=True) != key
    torch.set_num_threads(1)
    # weights outside the package (O1): models of one shape share it whatever their values
    outside = program_key(exported(), {}, "cpu", weights_inside=False)
    assert program_key(exported(seed=1), {}, "cpu", weights_inside=False) == outside != key


def package_files(folder, stem: str, data: bytes):
    package = folder / f"{stem}.pt2"
    package.write_bytes(data)
    constants_path(package).write_bytes(data[::-1])
    return package


def test_a_stored_package_comes_back_beside_its_constants_under_the_new_name(tmp_path):
    cache = PackageCache(tmp_path / "cache")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "cache").mkdir()
    cache.store("k1", package_files(tmp_path / "a", "verifier_w1", b"package bytes"))
    assert cache.fetch("k1", tmp_path / "b" / "drafter_w1.pt2") and cache.hits == 1
    assert (tmp_path / "b" / "drafter_w1.pt2").read_bytes() == b"package bytes"
    assert constants_path(tmp_path / "b" / "drafter_w1.pt2").read_bytes() == b"package bytes"[::-1]
    assert not cache.fetch("k2", tmp_path / "b" / "x.pt2") and cache.misses == 1  # never stored


def test_a_compile_that_stores_a_key_second_takes_the_first_package(tmp_path):
    """Two compiles of one program racing (a package lowered twice differs in bytes): the second to store takes the
    first's files, so both bundles hold the package the cache gives."""
    cache = PackageCache(tmp_path / "cache")
    (tmp_path / "cache").mkdir()
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    first = package_files(tmp_path / "a", "v", b"first lowering")
    second = package_files(tmp_path / "b", "v", b"second lowering")
    cache.store("k", first)
    cache.store("k", second)
    assert second.read_bytes() == first.read_bytes() == b"first lowering"
    assert constants_path(second).read_bytes() == b"first lowering"[::-1]
    assert cache.hits == cache.misses == 0  # lowered, not fetched


def test_an_entry_that_fails_its_hashes_is_dropped_not_used(tmp_path):
    cache = PackageCache(tmp_path)
    (tmp_path / "src").mkdir()
    cache.store("k", package_files(tmp_path / "src", "v", b"abc"))
    (tmp_path / "k" / "package.pt2").write_bytes(b"abd")  # damaged on disk
    out = tmp_path / "src" / "out.pt2"
    assert not cache.fetch("k", out) and not out.exists() and not (tmp_path / "k").exists()


def test_the_least_recently_used_entries_go_and_half_stored_ones_of_dead_compiles(tmp_path, monkeypatch):
    root, src = tmp_path / "cache", tmp_path / "src"
    root.mkdir()
    src.mkdir()
    cache = PackageCache(root)
    for i, key in enumerate(("old", "mid", "new")):
        cache.store(key, package_files(src, "v", bytes(100)))
        os.utime(root / key, (1000 + i, 1000 + i))
    cache.fetch("old", src / "o.pt2")  # used now: the most recent
    (root / ".k.999999999").mkdir()  # half stored by a compile whose pid no process has
    entry = sum(f.stat().st_size for f in (root / "new").iterdir())
    monkeypatch.setattr(package_cache, "MAX_BYTES", 2 * entry + entry // 2)  # room for two entries
    cache.prune()
    assert sorted(p.name for p in root.iterdir()) == ["new", "old"]


def test_the_cache_folder_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(package_cache.ENV, "off")
    assert package_cache.cache_root() is None
    with package_cache.using(None) as cache:
        assert cache is None and package_cache.active() is None
    monkeypatch.setenv(package_cache.ENV, str(tmp_path / "p"))
    with package_cache.using(package_cache.cache_root()) as cache:
        assert package_cache.active() is cache and cache.root == tmp_path / "p" and cache.root.is_dir()
    assert package_cache.active() is None
    monkeypatch.delenv(package_cache.ENV)
    assert package_cache.cache_root() == package_cache.DEFAULT_DIR.expanduser()


def test_a_meta_weight_is_keyed_by_its_name_dtype_and_shape():
    program, real = exported(), exported()
    for name, t in program.state_dict.items():
        program.state_dict[name] = torch.empty_like(t, device="meta")
    assert program_key(program, {}, "cpu", weights_inside=True) == program_key(real, {}, "cpu", weights_inside=False)


def test_a_compile_leaves_the_key_of_the_next_program_as_it_was(tmp_path):
    """Inductor writes into its settings during a compile (aot_inductor.metadata): not part of the key."""
    key = program_key(exported(), {}, "cpu", weights_inside=False)
    torch._inductor.aoti_compile_and_package(exported(), package_path=str(tmp_path / "p.pt2"))
    assert program_key(exported(), {}, "cpu", weights_inside=False) == key


def test_a_cache_that_cannot_be_written_leaves_the_compile_alone(tmp_path):
    (tmp_path / "file").write_text("")
    with package_cache.using(tmp_path / "file" / "cache") as cache:  # under a file: no folder can be made
        assert cache is None and package_cache.active() is None
    cache = PackageCache(tmp_path / "file")  # a file where the folder should be
    (tmp_path / "src").mkdir()
    cache.store("k", package_files(tmp_path / "src", "v", b"abc"))  # not kept, and no error
    assert not cache.fetch("k", tmp_path / "src" / "out.pt2")
