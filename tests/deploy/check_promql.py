#!/usr/bin/env python3
"""check_promql.py: every PromQL expression deploy/ ships must parse, with Prometheus' parser.

promtool has no "parse this expression" command, but `promtool check rules` parses each
rule's expr with the real PromQL parser. So each expression (collected and made concrete by
promql_exprs.py) becomes a recording rule in a temporary rule file, and promtool checks it.
A deliberately broken expression is checked too and must be rejected, which proves the
parser really runs. Every cinfer_* series named must be one cinfer exposes.

With --check-config it also runs `promtool check config` on deploy/prometheus/prometheus.yml.
Debian's Prometheus is built without Kubernetes service discovery, so promtool rejects
kubernetes_sd_configs; the file is checked with that block replaced by static targets that
carry the same __meta_kubernetes_* labels (everything else, relabelling included, is the
shipped text), and the block itself must be role: pod.

Usage: check_promql.py --repo ROOT [--promtool /usr/bin/promtool] [--check-config]
"""
import argparse
import pathlib
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import promql_exprs  # noqa: E402
import prom_scrape_test  # noqa: E402


def check_config(promtool, repo, tmp):
    cfg = yaml.safe_load((repo / "deploy/prometheus/prometheus.yml").read_text())
    metas = [prom_scrape_test.pod_meta("cinfer-server-a", "server", 8002)]
    others = [j for j in cfg["scrape_configs"] if j["job_name"] != "cinfer"]
    cfg["scrape_configs"] = prom_scrape_test.shipped_scrape_config(metas) + others
    d = pathlib.Path(tmp) / "cfg"
    d.mkdir()
    for rf in cfg.get("rule_files", []):
        (d / rf).write_text((repo / "deploy/prometheus" / rf).read_text())
    (d / "prometheus.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = subprocess.run([promtool, "check", "config", str(d / "prometheus.yml")],
                         capture_output=True, text=True, timeout=60)
    return res.returncode, res.stdout + res.stderr


def promtool_check(promtool, exprs, tmp):
    rules = [{"record": f"cinfer_check:expr_{i}", "expr": e} for i, (_, e) in enumerate(exprs)]
    path = pathlib.Path(tmp) / "exprs.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "check", "rules": rules}]}, sort_keys=False))
    res = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    return res.returncode, res.stdout + res.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", required=True, type=pathlib.Path)
    ap.add_argument("--promtool", default="promtool")
    ap.add_argument("--check-config", action="store_true")
    args = ap.parse_args()
    exprs = promql_exprs.collect(args.repo)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        # Negative control: a parse error must be reported, or this whole check is void.
        rc, out = promtool_check(args.promtool, [("control", 'sum(rate(cinfer_batch_size_count[5m])')], tmp)
        if rc == 0:
            print("promtool accepted a broken expression: the check cannot fail\n" + out)
            return 1
        rc, out = promtool_check(args.promtool, exprs, tmp)
        if rc != 0:
            print(out)
            # find which ones fail, one by one, to name them
            for where, e in exprs:
                rc1, out1 = promtool_check(args.promtool, [(where, e)], tmp)
                if rc1 != 0:
                    print(f"FAIL parse: {where}: {e}\n{out1}")
                    failures += 1
            failures = max(failures, 1)
        if args.check_config:
            rc, out = check_config(args.promtool, args.repo, tmp)
            print(("ok" if rc == 0 else "FAIL") + ": promtool check config deploy/prometheus/prometheus.yml "
                  "(kubernetes_sd as static targets)\n" + out)
            failures += rc != 0
    for where, e in exprs:
        bad = promql_exprs.unknown_series(e)
        if bad:
            print(f"FAIL names: {where}: series cinfer does not expose: {bad}")
            failures += 1
    passed = len(exprs) - failures if failures <= len(exprs) else 0
    print(f"{len(exprs)} expressions (dashboard, adapter, KEDA, alerts) parsed by promtool; "
          f"{passed} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
