#!/usr/bin/env python3
"""The files of src/server form a DAG (docs/design/server.md, "Files").

Each .c file's head comment has a line "May call: a.c, b.c (notes), ..." (or "nothing of
src/server"). This test reads the calls each object file really makes (its undefined
symbols, resolved to the object that defines them) and fails when a file calls one it
does not list, when a file has no "May call" line, or when the graph has a cycle.

usage: check_file_dag.py SRC_DIR OBJECT...
"""
import os
import re
import subprocess
import sys


def may_call(path):
    text = open(path, encoding="utf-8").read()
    head = text[: text.index("*/")] if "*/" in text else ""
    m = re.search(r"May call:(.*?)(?:\.\s|\.$|$)", head.replace("\n *", " "), re.S)
    if not m:
        return None
    listed = re.sub(r"\([^)]*\)", "", m.group(1))
    return set(re.findall(r"\b([a-z_0-9]+)\.c\b", listed))


def symbols(objs, defined):
    """{object: set of its defined (or undefined) symbols}, with one nm for all objects."""
    args = ["nm", "-A", "--defined-only" if defined else "--undefined-only"] + objs
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    names = {o: set() for o in objs}
    for line in out.splitlines():
        obj, _, rest = line.partition(":")  # "path/x.c.o:0000 T name" (-A)
        f = rest.split()
        if obj not in names or not f:
            continue
        if defined and len(f) == 3 and f[1] in "TDBR":
            names[obj].add(f[2])
        elif not defined and f[0] == "U":
            names[obj].add(f[-1])
    return names


def unit(obj):
    base = os.path.basename(obj)
    return base[: base.index(".c.")] if ".c." in base else base.split(".")[0]


def main():
    src, objs = sys.argv[1], sys.argv[2:]
    if not objs:
        sys.exit("no object files given")
    owner = {}
    for o, syms in symbols(objs, True).items():
        for s in syms:
            owner[s] = unit(o)
    edges = {}
    for o, syms in symbols(objs, False).items():
        u = unit(o)
        edges[u] = {owner[s] for s in syms if s in owner and owner[s] != u}
    bad = []
    for u, deps in sorted(edges.items()):
        allowed = may_call(os.path.join(src, u + ".c"))
        if allowed is None:
            bad.append(f"{u}.c: no 'May call:' line in its head comment")
            continue
        for d in sorted(deps - allowed):
            bad.append(f"{u}.c calls {d}.c, which its 'May call' line does not list")
    # cycles (depth-first search over the real edges)
    state, stack = {}, []

    def visit(u):
        state[u] = 1
        stack.append(u)
        for d in sorted(edges.get(u, ())):
            if state.get(d) == 1:
                bad.append("cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d)
        stack.pop()
        state[u] = 2

    for u in sorted(edges):
        if u not in state:
            visit(u)
    for b in bad:
        print(b)
    print(f"{len(edges)} files, {sum(len(d) for d in edges.values())} edges, "
          f"{len(bad)} problems")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
