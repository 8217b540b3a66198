"""Reads C++ sources as the code-shape checks need them: comments and literals
blanked (line numbers kept), function bodies found by their braces, includes listed."""

import re

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def blank_comments_and_literals(src):
    """`src` with comments, string and character literals emptied, newlines kept."""
    out, i, n = [], 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif src.startswith('R"', i) and re.match(r'R"([^(\s]*)\(', src[i:]):
            delim = re.match(r'R"([^(\s]*)\(', src[i:]).group(1)
            j = src.find(")" + delim + '"', i)
            j = n if j < 0 else j + len(delim) + 2
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
        elif src[i] in "\"'":
            quote, j = src[i], i + 1
            while j < n and src[j] != quote and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(quote * 2)
            i = j + 1
        else:
            out.append(src[i])
            i += 1
    return "".join(out)


# The text before a `{` that opens a function body: a parameter list's `)`, then
# qualifiers, a trailing return type or a constructor's initialiser list.
_FUNCTION_HEAD = re.compile(
    r"\)\s*(const\s*)?(noexcept\s*)?(override\s*|final\s*)*(->\s*[\w:<>,\s*&]+)?$"
    r"|\)\s*:\s*[\s\S]*\)\s*$")
_CONTROL = re.compile(r"\b(if|for|while|switch|catch|else)\b")
_NAME = re.compile(r"([\w:~]+)\s*\([^;{}]*$")


def functions(src):
    """(name, first line, line count) of each function body outside another's:
    free functions, member functions and lambdas at namespace scope, not the
    lambdas and blocks inside a function, which count as its lines."""
    text = blank_comments_and_literals(src)
    found, stack, line, head_start = [], [], 1, 0
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c == "{":
            head = text[head_start:i]
            if any(kind == "function" for kind, _, _ in stack):
                kind = "inside"
            elif re.search(r"\bnamespace\b[^;{}]*$", head) or re.search(r'extern\s*""\s*$', head):
                kind = "namespace"
            elif _FUNCTION_HEAD.search(head.rstrip()) and not _CONTROL.search(head.split("\n")[-1]):
                kind = "function"
            else:
                kind = "other"
            match = _NAME.search(head)
            stack.append((kind, line, match.group(1) if match else "?"))
            head_start = i + 1
        elif c == "}":
            if not stack:
                continue
            kind, first, name = stack.pop()
            if kind == "function":
                found.append((name, first, line - first + 1))
            head_start = i + 1
        elif c == ";":
            head_start = i + 1
    return found


def includes(src):
    """The project headers a file includes ("..." includes), in order."""
    return _INCLUDE.findall(src)
