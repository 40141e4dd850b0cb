"""Source sizes (issue 14): no file under src/ over 1,200 lines and no function
over 150, so that each file can be read in one sitting (docs: STYLE.md).

A function is found as this code base writes one: its body opens with '{' at
column 0 (after the signature) and closes with '}' at column 0; its length is
that of the body, from the '{' line to the '}' line. Struct and enum
definitions and initialisers open their brace at the end of a line, so they are
not counted. The measure is checked on synthetic sources first, so that a
broken scanner cannot pass the real tree by finding nothing."""

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIR = REPO_ROOT / "src"

MAX_FILE_LINES = 1200
MAX_FUNCTION_LINES = 150

# Words followed by '(' in a signature that are not the function's name.
NOT_NAMES = {"__attribute__", "sizeof", "TC_MUST_CHECK", "if", "while", "for", "switch", "return"}


def function_name(signature):
    """The defined name in a signature's text: the first identifier before '('."""
    for match in re.finditer(r"([A-Za-z_]\w*)\s*\(", signature):
        if match.group(1) not in NOT_NAMES:
            return match.group(1)
    return "?"


def measure(text):
    """(line count, [(name, body lines, first line), ...]) of one C source."""
    lines = text.splitlines()
    functions = []
    opening = None
    for number, line in enumerate(lines):
        if line.startswith("{") and opening is None:
            opening = number
        elif line.startswith("}") and opening is not None:
            # The signature: the lines above the '{' back to a blank line or the end of
            # the previous declaration, comment or directive.
            start = opening
            while start > 0:
                above = lines[start - 1]
                stripped = above.strip()
                if (not stripped or stripped.endswith((";", "}", "*/")) or stripped.startswith("#")
                        or above.startswith("}")):
                    break
                start -= 1
            name = function_name(" ".join(lines[start:opening]))
            functions.append((name, number - opening + 1, opening + 1))
            opening = None
    return len(lines), functions


def oversized(path, text):
    """The complaints about one file, each naming it."""
    line_count, functions = measure(text)
    complaints = []
    if line_count > MAX_FILE_LINES:
        complaints.append("%s: %d lines (at most %d)" % (path, line_count, MAX_FILE_LINES))
    for name, length, first in functions:
        if length > MAX_FUNCTION_LINES:
            complaints.append("%s:%d: function %s is %d lines (at most %d)"
                              % (path, first, name, length, MAX_FUNCTION_LINES))
    return complaints


def synthetic_function(name, body_lines, signature_lines=1):
    """A C function in the house style whose body ('{' to '}') has body_lines lines."""
    if signature_lines == 1:
        signature = ["static bool %s(int a, int b)" % name]
    else:
        signature = ["static bool", "%s(int a," % name, "    int b)"]
    body = ["{"] + ["    a += b;"] * (body_lines - 3) + ["    return a > 0;", "}"]
    return signature + body


def test_the_measure_finds_a_long_function_and_a_long_file():
    source = "\n".join(
        ["/* A synthetic file. */", "#include <stdbool.h>", "",
         "typedef struct pair {", "    int a;", "    int b;", "} pair_t;", "",
         "static const int table[] = {", "    1,", "    2,", "};", ""]
        + synthetic_function("short_enough", MAX_FUNCTION_LINES) + [""]
        + ["/* Too long, with its signature", " * over three lines. */"]
        + synthetic_function("far_too_long", MAX_FUNCTION_LINES + 1, signature_lines=3) + [""]
        + synthetic_function("tiny", 5)) + "\n"
    line_count, functions = measure(source)
    assert line_count == source.count("\n")
    assert [(name, length) for name, length, _ in functions] == [
        ("short_enough", MAX_FUNCTION_LINES), ("far_too_long", MAX_FUNCTION_LINES + 1), ("tiny", 5)]
    complaints = oversized("synthetic.c", source)
    assert len(complaints) == 1 and "function far_too_long is 151 lines" in complaints[0], complaints

    long_file = "\n".join(["int x%d;" % i for i in range(MAX_FILE_LINES + 1)]) + "\n"
    assert oversized("long.h", long_file) == ["long.h: 1201 lines (at most 1200)"]
    assert oversized("just_right.h", "\n".join(["int x%d;" % i for i in range(MAX_FILE_LINES)]) + "\n") == []


def test_no_source_file_or_function_is_too_long():
    paths = sorted(path for path in SOURCE_DIR.rglob("*") if path.suffix in (".c", ".h"))
    assert len(paths) > 100, "found only %d sources under %s" % (len(paths), SOURCE_DIR)
    complaints = []
    functions_seen = 0
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        functions_seen += len(measure(text)[1])
        complaints += oversized(path.relative_to(REPO_ROOT), text)
    assert functions_seen > 1000, "found only %d function bodies: is the scanner broken?" % functions_seen
    assert not complaints, "too long:\n" + "\n".join(complaints)
