"""The layout's import rules, read from the AST of every module (nothing is imported to check them).

graphs <- tree <- plan <- runtime <- passes / bench / serve / train <- cli; bundle beside them (imported by runtime
and passes, importing neither); artifacts (compiled packages and buckets) under the runtime and the passes, importing
neither. Each rule names the packages a package may import from yggc. The package never
imports a tools/ script nor edits sys.path: tools/ may import yggc, never the reverse.
No two modules share a file name (yggc/cli/'s modules, named after their commands, excepted).
"""
import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"yggc": ROOT / "yggc", "yggc.graphs": ROOT / "graphs", "yggc.passes": ROOT / "passes"}
TOOLS = ROOT / "tools"

# package -> the yggc packages and modules it may import (prefix match); None: no rule beyond the global ones
ALLOWED = {
    "yggc.graphs": ("yggc.graphs",),
    "yggc.tree": ("yggc.tree", "yggc.errors", "yggc.compat"),
    "yggc.plan": ("yggc.plan", "yggc.tree", "yggc.errors", "yggc.compat"),
    "yggc.bundle": ("yggc.bundle", "yggc.errors", "yggc.compat", "yggc"),  # "yggc" itself for __version__
    "yggc.artifacts": ("yggc.artifacts", "yggc.tree", "yggc.bundle", "yggc.errors", "yggc.compat"),
    "yggc.serve": ("yggc.serve", "yggc.runtime", "yggc.bundle", "yggc.errors", "yggc"),
    "yggc.train": ("yggc.train", "yggc.graphs", "yggc.runtime", "yggc.bundle", "yggc.errors"),
}
FORBIDDEN = {"yggc.runtime": ("yggc.passes", "yggc.bench", "yggc.serve", "yggc.train", "yggc.cli")}


def module_files() -> dict[str, Path]:
    """yggc module name -> source file, as installed (graphs/ and passes/ under the yggc namespace)."""
    out = {}
    for prefix, folder in SOURCES.items():
        for f in folder.rglob("*.py"):
            parts = list(f.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([prefix, *parts])
            if prefix == "yggc" and parts and parts[0] in ("graphs", "passes"):
                continue  # not a real path: the namespace is installed from the top-level folders
            out[name] = f
    return out


def imports_of(name: str, source: str, known: set[str], is_package: bool) -> list[tuple[str, bool]]:
    """(imported yggc module, at module level?) for every import statement in `source`."""
    package = name if is_package else name.rpartition(".")[0]
    found = []
    tree = ast.parse(source)
    top_level = {id(n) for n in tree.body} | {id(n) for n in ast.walk(tree) if isinstance(n, ast.If)
                                              for n in n.body}  # `if TYPE_CHECKING:` blocks count as top level
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        found += [(t, id(node) in top_level) for t in targets if t == "yggc" or t.startswith("yggc.")]
    return found


def import_graph() -> nx.DiGraph:
    files = module_files()
    g = nx.DiGraph()
    for name, f in files.items():
        g.add_node(name)
        for target, top in imports_of(name, f.read_text(), set(files), f.name == "__init__.py"):
            g.add_edge(name, target, top_level=top)
    return g


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def violations(g: nx.DiGraph) -> list[str]:
    """Every import that breaks a layout rule, as 'importer -> imported (rule)'."""
    bad = []
    for src, dst in g.edges:
        if within(dst, "yggc.cli") and not within(src, "yggc.cli") and src != "yggc.__main__":  # `python -m yggc`
            bad.append(f"{src} -> {dst} (nothing imports yggc.cli)")
        for package, allowed in ALLOWED.items():
            if within(src, package) and not any(dst == a or within(dst, a) and a != "yggc" for a in allowed):
                bad.append(f"{src} -> {dst} ({package} may import only {', '.join(allowed)})")
        for package, forbidden in FORBIDDEN.items():
            if within(src, package) and any(within(dst, f) for f in forbidden):
                bad.append(f"{src} -> {dst} ({package} never imports {', '.join(forbidden)})")
    return bad


def test_every_module_keeps_the_layout_rules():
    assert violations(import_graph()) == []


def import_cycles(g: nx.DiGraph, load_time_only: bool) -> list[list[str]]:
    """Cycles among yggc modules: through imports run when a module loads, or through any import (lazy ones in
    functions too). A package's __init__ importing its own submodule is how packages work, not a cycle."""
    edges = [(a, b) for a, b, top in g.edges(data="top_level")
             if a != b and not within(b, a) and (top or not load_time_only)]
    return list(nx.simple_cycles(nx.DiGraph(edges)))


def test_no_import_cycle_among_yggc_modules():
    assert import_cycles(import_graph(), load_time_only=True) == []


def test_no_import_cycle_even_through_lazy_imports():
    assert import_cycles(import_graph(), load_time_only=False) == []


def test_a_lazy_import_cycle_is_caught():
    g = import_graph()
    g.add_edge("yggc.cli.ranks", "yggc.cli.main", top_level=False)  # `from .main import ...` inside a function
    g.add_edge("yggc.cli.main", "yggc.cli.ranks", top_level=True)
    assert import_cycles(g, load_time_only=False) and not import_cycles(g, load_time_only=True)


@pytest.mark.parametrize("importer, line, rule", [
    ("yggc.tree.prune", "from ..runtime.loading import load", "yggc.tree may import only"),
    ("yggc.plan.objective", "from ..runtime.draft_phase import DraftPhase", "yggc.plan may import only"),
    ("yggc.runtime.runtime", "from ..passes.pipeline import compile_bundle", "yggc.runtime never imports"),
    ("yggc.runtime.speculative", "import yggc.bench.harness", "yggc.runtime never imports"),
    ("yggc.bench.harness", "from ..cli.main import main", "nothing imports yggc.cli"),
    ("yggc.graphs.llama", "from yggc.errors import YggcError", "yggc.graphs may import only"),
    ("yggc.bundle.manifest", "from ..runtime import loading", "yggc.bundle may import only"),
    ("yggc.runtime.runtime", "from ..serve.app import create_app", "yggc.runtime never imports"),
    ("yggc.serve.app", "from ..passes.pipeline import compile_bundle", "yggc.serve may import only"),
    ("yggc.serve.worker", "from ..bench.harness import run", "yggc.serve may import only"),
    ("yggc.serve.app", "from ..cli.main import main", "nothing imports yggc.cli"),
    ("yggc.runtime.runtime", "from ..train.loop import train_model", "yggc.runtime never imports"),
    ("yggc.train.eagle3_head", "from ..passes.pipeline import compile_bundle", "yggc.train may import only"),
    ("yggc.train.loop", "from ..cli.main import main", "nothing imports yggc.cli"),
    ("yggc.artifacts.buckets", "from ..runtime.trace import StageTrace", "yggc.artifacts may import only"),
    ("yggc.artifacts.aoti_package", "from ..passes.lower import lower", "yggc.artifacts may import only"),
])
def test_a_forbidden_import_is_caught(importer, line, rule):
    g = import_graph()
    known = set(g.nodes)
    for target, top in imports_of(importer, line, known, False):
        g.add_edge(importer, target, top_level=top)
    assert any(importer in v and rule in v for v in violations(g))


def tools_reached(source: str, scripts: set[str]) -> list[str]:
    """The tools/ scripts `source` imports by name, and "sys.path" if it edits the import path."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in scripts]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in scripts:
            found.append(node.module)
        elif isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
            found.append("sys.path")
    return found


def test_the_package_never_imports_a_tools_script():
    scripts = {f.stem for f in TOOLS.glob("*.py")}
    reached = {n: tools_reached(f.read_text(), scripts) for n, f in module_files().items()}
    assert {n: r for n, r in reached.items() if r} == {}


@pytest.mark.parametrize("line, found", [
    ("from bench_drafters import main", ["bench_drafters"]),
    ("import random_checkpoint as rc", ["random_checkpoint"]),
    ("sys.path.insert(0, 'tools')", ["sys.path"]),
    ("from .suite import PROMPTS_FILE\nimport json", []),
])
def test_a_tools_import_is_caught(line, found):
    assert tools_reached(line, {f.stem for f in TOOLS.glob("*.py")}) == found


# base names that may repeat: a package's own files, and yggc/cli/'s modules (each named after its command)
SHARED_NAMES = {"__init__.py", "__main__.py"}
NAMED_AFTER_COMMANDS = ROOT / "yggc" / "cli"


def repeated_names(files: list[Path]) -> dict[str, list[str]]:
    """Base name -> the files under ROOT that share it, where more than one module has it."""
    seen: dict[str, list[str]] = {}
    for f in files:
        if f.name not in SHARED_NAMES and f.parent != NAMED_AFTER_COMMANDS:
            seen.setdefault(f.name, []).append(str(f.relative_to(ROOT)))
    return {name: sorted(paths) for name, paths in seen.items() if len(paths) > 1}


def test_no_two_modules_share_a_name():
    """A file name alone says where a module lives: graphs/config.py is the only config.py."""
    assert repeated_names(list(module_files().values())) == {}


def test_a_shared_name_is_caught():
    files = list(module_files().values()) + [ROOT / "yggc" / "serve" / "llama.py", ROOT / "yggc" / "cli" / "config.py",
                                             ROOT / "passes" / "__init__.py"]
    assert repeated_names(files) == {"llama.py": ["graphs/llama.py", "yggc/serve/llama.py"]}


def test_modules_stay_small():
    long = {n: len(f.read_text().splitlines()) for n, f in module_files().items()}
    assert {n: k for n, k in long.items() if k > 400} == {}


# where a drafter's kind may be tested: the kind plug-ins, and graphs/ where the EAGLE-3 head and its folder check live
KIND_TESTS_ALLOWED = (ROOT / "yggc" / "runtime" / "drafters", ROOT / "graphs")


def named(node: ast.AST) -> str:
    """The name a call or an isinstance class argument reads: `f` of f(...) and of mod.f(...)."""
    return getattr(node, "id", None) or getattr(node, "attr", "")


def kind_tests(source: str) -> list[str]:
    """Every test of which drafter kind something is: is_head(...) / is_eagle3(...), drafter_kind(...) compared, an
    isinstance whose classes name Eagle3 (each as the source text of the call or comparison)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and named(node.func) in ("is_head", "is_eagle3"):
            found.append(ast.unparse(node))
        elif isinstance(node, ast.Call) and named(node.func) == "isinstance" and len(node.args) == 2:
            if any("Eagle3" in named(n) for n in ast.walk(node.args[1])):
                found.append(ast.unparse(node))
        elif isinstance(node, ast.Compare):
            if any(isinstance(n, ast.Call) and named(n.func) == "drafter_kind" for n in [node.left, *node.comparators]):
                found.append(ast.unparse(node))
    return found


def test_only_the_drafter_kinds_test_which_kind_a_drafter_is():
    """A drafter is a type, not a branch: everything outside yggc/runtime/drafters/ asks the kind (drafters.kind_of,
    kind_of_folder) what it does instead of testing which kind it is."""
    tests = {str(f.relative_to(ROOT)): kind_tests(f.read_text()) for f in module_files().values()
             if not any(f.is_relative_to(folder) for folder in KIND_TESTS_ALLOWED)}
    assert {f: found for f, found in tests.items() if found} == {}


@pytest.mark.parametrize("line, found", [
    ("if is_head(model.graph):\n    pass", ["is_head(model.graph)"]),
    ("head = drafters.is_head(d)", ["drafters.is_head(d)"]),
    ("eagle3 = drafter_kind(path) == 'eagle3'", ["drafter_kind(path) == 'eagle3'"]),
    ("x = 'llama' != drafters.drafter_kind(path)", ["'llama' != drafters.drafter_kind(path)"]),
    ("ok = isinstance(g, Eagle3Graph)", ["isinstance(g, Eagle3Graph)"]),
    ("ok = isinstance(g, (LlamaGraph, eagle3.Eagle3Graph))", ["isinstance(g, (LlamaGraph, eagle3.Eagle3Graph))"]),
    ("head = is_eagle3(folder)", ["is_eagle3(folder)"]),
    ("ok = isinstance(g, LlamaGraph)\nhead = kind_of(g).head", []),
])
def test_a_kind_test_is_caught(line, found):
    assert kind_tests(line) == found


def class_shape_faults(source: str, project_classes: set[str]) -> list[str]:
    """Every class that inherits from more than one project class (a mixin) and every `x.__class__ = ...` (a class
    swapped at run time) in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            ours = [ast.unparse(b) for b in node.bases if named(b).rpartition(".")[2] in project_classes]
            if len(ours) > 1:
                found.append(f"class {node.name}({', '.join(ours)})")
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [ast.unparse(t) for t in targets if isinstance(t, ast.Attribute) and t.attr == "__class__"]
    return found


def test_no_mixins_and_no_class_swapping():
    """Drafting is extended by proposers behind one interface (yggc/runtime/draft.py), not by mixins or by swapping a
    decoder's class: no class inherits from two of the project's classes, and nothing assigns __class__."""
    sources = {str(f.relative_to(ROOT)): f.read_text() for f in module_files().values()}
    project_classes = {n.name for s in sources.values() for n in ast.walk(ast.parse(s)) if isinstance(n, ast.ClassDef)}
    faults = {f: class_shape_faults(s, project_classes) for f, s in sources.items()}
    assert {f: found for f, found in faults.items() if found} == {}


@pytest.mark.parametrize("source, found", [
    ("class A: pass\nclass B(A, C): pass", ["class B(A, C)"]),
    ("class B(A, str): pass", []),
    ("decoder.__class__ = type('X', (Mixin, type(decoder)), {})", ["decoder.__class__"]),
])
def test_a_mixin_or_a_class_swap_is_caught(source, found):
    assert class_shape_faults(source, {"A", "C", "Mixin"}) == found
