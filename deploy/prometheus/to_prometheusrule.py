#!/usr/bin/env python3
"""to_prometheusrule.py: derive the PrometheusRule manifest from alerts.yml.

alerts.yml (a plain Prometheus rule file, checked and unit-tested by promtool) is the one
source of the alert rules; deploy/k8s/components/monitoring/prometheusrule.yaml is generated
from it for prometheus-operator. Run after editing alerts.yml:
    python3 deploy/prometheus/to_prometheusrule.py --write
tests/deploy runs it with --check, which fails when the two differ.
"""
import argparse
import pathlib
import sys

import yaml

HERE = pathlib.Path(__file__).resolve().parent
SRC = HERE / "alerts.yml"
DST = HERE.parent / "k8s" / "components" / "monitoring" / "prometheusrule.yaml"

HEADER = """\
# GENERATED from deploy/prometheus/alerts.yml by deploy/prometheus/to_prometheusrule.py;
# edit alerts.yml and rerun it with --write (tests/deploy fails when the two differ).
"""


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper, data):
    if "\n" in data:
        style = "|"
    elif len(data) > 60:
        style = ">"     # long annotations: folded, so lines stay short and the text is exact
    else:
        style = None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


class _Indented(_Dumper):
    # Indent sequences inside mappings, as yamllint's default "indentation" rule expects
    # consistently and as the hand-written manifests do.
    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)


def render() -> str:
    groups = yaml.safe_load(SRC.read_text())["groups"]
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "cinfer",
            "labels": {"app.kubernetes.io/name": "cinfer",
                       "app.kubernetes.io/component": "monitoring"},
        },
        "spec": {"groups": groups},
    }
    body = yaml.dump(doc, Dumper=_Indented, sort_keys=False, width=100,
                     default_flow_style=False, allow_unicode=True)
    return HEADER + body


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the PrometheusRule")
    ap.add_argument("--check", action="store_true", help="fail when it is out of date")
    args = ap.parse_args()
    text = render()
    if args.write:
        DST.write_text(text)
        print(f"wrote {DST}")
        return 0
    current = DST.read_text() if DST.exists() else ""
    if current != text:
        print(f"{DST} is out of date with {SRC}: run {__file__} --write", file=sys.stderr)
        return 1
    # Equal text is not enough to trust the generator: compare the parsed rules too.
    if yaml.safe_load(current)["spec"]["groups"] != yaml.safe_load(SRC.read_text())["groups"]:
        print("parsed rule groups differ", file=sys.stderr)
        return 1
    print(f"ok: {DST.name} matches {SRC.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
