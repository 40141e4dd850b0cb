"""The layout of src/ is the architecture: this check reads every
`#include "folder/..."` line of the C sources and fails on

- a cycle between src/ folders (folder A includes B, which includes ... A),
  printed as `a -> b -> a` with the include line behind each step;
- an include that the including folder's README does not allow.

The rule for the READMEs (src/<folder>/README.md):

- Each has exactly one line that starts with `May call:`. Only that line is
  read, so prose around it (what calls the folder, what it must not call) is
  free text; keep the list on that one line.
- On it, a backticked `folder/` allows every header of src/folder/, and a
  backticked `folder/file.h` allows that header alone. A leading `src/` is
  accepted. Other backticked words, and libraries written without backticks,
  are not checked.
- A folder may always include its own headers.

Only the files inside a folder of src/ count: src/main.c, which wires the
subcommands together, includes whatever it starts. An include whose first
part is not a folder of src/ (a library written with quotes) is not checked.

The self-checks at the end run the same code on a synthetic tree, so the
check cannot pass by finding nothing.
"""

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SOURCE_ROOT = REPO_ROOT / "src"

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/([^"]+)"')
MAY_CALL = re.compile(r"^May call:(.*)$")
BACKTICKED = re.compile(r"`([^`]+)`")


def folders_of(source_root):
    """The folders directly under source_root, by name."""
    return sorted(path.name for path in source_root.iterdir() if path.is_dir())


def read_includes(source_root):
    """Every `#include "folder/..."` line of a file inside a folder of
    source_root, as (including folder, included folder, included path, file
    relative to the root, line number). The included folder must be one of
    source_root's."""
    folders = set(folders_of(source_root))
    includes = []
    for folder in sorted(folders):
        for path in sorted((source_root / folder).rglob("*")):
            if path.suffix not in (".c", ".h") or not path.is_file():
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            for number, line in enumerate(text.splitlines(), start=1):
                match = INCLUDE.match(line)
                if match and match.group(1) in folders:
                    target = match.group(1)
                    includes.append((folder, target, target + "/" + match.group(2),
                                     str(path.relative_to(source_root)), number))
    return includes


def read_may_call(source_root, folder):
    """What the README of folder allows: (folders, headers). Raises
    AssertionError when the README or its single `May call:` line is
    missing."""
    readme = source_root / folder / "README.md"
    assert readme.is_file(), "src/%s has no README.md" % folder
    lines = [MAY_CALL.match(line) for line in readme.read_text(encoding="utf-8").splitlines()]
    lines = [match for match in lines if match]
    assert len(lines) == 1, "src/%s/README.md must have exactly one line starting with 'May call:', has %d" % (
        folder, len(lines))
    known = set(folders_of(source_root))
    allowed_folders, allowed_headers = set(), set()
    for word in BACKTICKED.findall(lines[0].group(1)):
        word = word.strip()
        if word.startswith("src/"):
            word = word[len("src/"):]
        name, slash, rest = word.partition("/")
        if not slash or name not in known:
            continue
        if rest == "":
            allowed_folders.add(name)
        else:
            allowed_headers.add(word)
    return allowed_folders, allowed_headers


def forbidden_includes(source_root, includes):
    """The includes a README does not allow, as readable lines."""
    rules = {}
    problems = []
    for folder, target, header, path, number in includes:
        if folder == target:
            continue
        if folder not in rules:
            rules[folder] = read_may_call(source_root, folder)
        allowed_folders, allowed_headers = rules[folder]
        if target not in allowed_folders and header not in allowed_headers:
            problems.append('src/%s:%d includes "%s", which src/%s/README.md\'s "May call:" line does not name'
                            % (path, number, header, folder))
    return problems


def folder_graph(includes):
    """{folder: {included folder: first include line behind the edge}}."""
    graph = {}
    for folder, target, header, path, number in includes:
        if folder != target:
            graph.setdefault(folder, {}).setdefault(target, 'src/%s:%d includes "%s"' % (path, number, header))
    return graph


def find_cycle(graph):
    """One cycle of graph as a list of folders whose first and last are the
    same ([] when there is none): a depth-first search that stops at the
    first edge back into the current path."""
    state = {}  # absent: not seen; 1: on the current path; 2: done
    path = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for successor in sorted(graph.get(node, {})):
            if state.get(successor) == 1:
                return path[path.index(successor):] + [successor]
            if successor not in state:
                cycle = visit(successor)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return []


def describe_cycle(graph, cycle):
    steps = ["  %s -> %s: %s" % (a, b, graph[a][b]) for a, b in zip(cycle, cycle[1:])]
    return "cycle between src/ folders: %s\n%s" % (" -> ".join(cycle), "\n".join(steps))


# --- the checks on src/ ---------------------------------------------------------------


def test_no_cycle_between_source_folders():
    graph = folder_graph(read_includes(SOURCE_ROOT))
    cycle = find_cycle(graph)
    assert not cycle, describe_cycle(graph, cycle)


def test_every_include_is_allowed_by_its_folders_readme():
    problems = forbidden_includes(SOURCE_ROOT, read_includes(SOURCE_ROOT))
    assert not problems, "\n".join(problems)


def test_every_folder_has_one_may_call_line():
    for folder in folders_of(SOURCE_ROOT):
        read_may_call(SOURCE_ROOT, folder)


def test_the_scan_sees_the_real_includes():
    """Not vacuous: includes everyone knows are there are found."""
    graph = folder_graph(read_includes(SOURCE_ROOT))
    edges = {(a, b) for a in graph for b in graph[a]}
    for edge in [("proxy", "client"), ("proxy", "tier"), ("tier", "config"), ("bench", "client"),
                 ("store", "query"), ("wire", "common")]:
        assert edge in edges, "the scan did not find %s including %s" % edge
    assert len(edges) >= 20, sorted(edges)


# --- self-checks on a synthetic tree ------------------------------------------------------


def write(root, relative, text):
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_self_check_a_synthetic_cycle_is_found(tmp_path):
    write(tmp_path, "alpha/README.md", "# alpha\nMay call: `beta/`.\n")
    write(tmp_path, "beta/README.md", "# beta\nMay call: `gamma/`.\n")
    write(tmp_path, "gamma/README.md", "# gamma\nMay call: `src/alpha/`.\n")
    write(tmp_path, "alpha/a.c", '#include "alpha/a.h"\n#include "beta/b.h"\n')
    write(tmp_path, "beta/b.h", '#include "gamma/g.h"\n')
    write(tmp_path, "gamma/g.c", '#include <stdio.h>\n  #  include "alpha/a.h"\n')
    includes = read_includes(tmp_path)
    graph = folder_graph(includes)
    cycle = find_cycle(graph)
    assert cycle == ["alpha", "beta", "gamma", "alpha"], cycle
    message = describe_cycle(graph, cycle)
    assert 'gamma -> alpha: src/gamma/g.c:2 includes "alpha/a.h"' in message, message
    # Every include is allowed there: the cycle is what fails.
    assert forbidden_includes(tmp_path, includes) == []
    # Without the edge back, no cycle.
    write(tmp_path, "gamma/g.c", "#include <stdio.h>\n")
    assert find_cycle(folder_graph(read_includes(tmp_path))) == []


def test_self_check_a_forbidden_include_is_found(tmp_path):
    write(tmp_path, "alpha/README.md",
          "# alpha\nMay call: `beta/one.h`, libbson.\nNothing here calls `gamma/`.\n")
    write(tmp_path, "beta/README.md", "# beta\nMay call: nothing.\n")
    write(tmp_path, "gamma/README.md", "# gamma\nMay call: nothing.\n")
    write(tmp_path, "alpha/a.c", '#include "beta/one.h"\n#include "beta/two.h"\n#include "gamma/g.h"\n'
                                 '#include "bson/bson.h"\n')
    problems = forbidden_includes(tmp_path, read_includes(tmp_path))
    assert len(problems) == 2, problems
    assert 'src/alpha/a.c:2 includes "beta/two.h"' in problems[0], problems
    assert 'src/alpha/a.c:3 includes "gamma/g.h"' in problems[1], problems
    # A README without its line, or with two, is refused.
    write(tmp_path, "beta/README.md", "# beta\nCalls nothing.\n")
    write(tmp_path, "beta/b.c", '#include "alpha/a.h"\n')
    try:
        forbidden_includes(tmp_path, read_includes(tmp_path))
    except AssertionError as error:
        assert "exactly one line starting with 'May call:'" in str(error)
    else:
        raise AssertionError("a README without a 'May call:' line was accepted")
