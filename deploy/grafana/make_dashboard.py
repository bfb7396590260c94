#!/usr/bin/env python3
"""make_dashboard.py: generate cinfer-dashboard.json, the Grafana dashboard for cinfer.

The panels are listed once below (title, unit, PromQL per series); the JSON Grafana imports is
generated from them so every panel has the same layout and variable handling. After editing:
    python3 deploy/grafana/make_dashboard.py --write
tests/deploy runs --check (JSON up to date) and checks every expression with promtool and
against a real Prometheus. Variables: $datasource (Prometheus), $namespace, $model.
Metric names are the ones in docs (COMMON metric list); nothing here invents series.
"""
import argparse
import json
import pathlib
import sys

OUT = pathlib.Path(__file__).resolve().parent / "cinfer-dashboard.json"

S = 'namespace=~"$namespace", model=~"$model"'      # server series selector
R = "$__rate_interval"


def q(p, metric, by="le", sel=S):
    return (f"histogram_quantile({p}, sum by ({by}) "
            f"(rate({metric}_bucket{{{sel}}}[{R}])))")


# (row title, [(panel title, unit, [(expr, legend)])])
ROWS = [
    ("Traffic and latency", [
        ("Throughput (inferences/s)", "reqps", [
            (f"sum by (model) (rate(cinfer_inference_count_total{{{S}}}[{R}]))", "{{model}}"),
            (f"sum(rate(cinfer_request_success_total{{{S}}}[{R}]))", "requests ok"),
            (f"sum(rate(cinfer_request_failure_total{{{S}}}[{R}]))", "requests failed"),
        ]),
        ("Request latency P50 / P90 / P99", "s", [
            (q(0.5, "cinfer_request_duration_seconds"), "P50"),
            (q(0.9, "cinfer_request_duration_seconds"), "P90"),
            (q(0.99, "cinfer_request_duration_seconds"), "P99"),
        ]),
        ("P99 by model: queue vs compute", "s", [
            (q(0.99, "cinfer_queue_duration_seconds", "model, le"), "queue {{model}}"),
            (q(0.99, "cinfer_compute_duration_seconds", "model, le"), "compute {{model}}"),
        ]),
        ("Failures and rejections by reason", "reqps", [
            (f"sum by (reason) (rate(cinfer_request_failure_total{{{S}}}[{R}]))", "failed: {{reason}}"),
            (f"sum by (reason) (rate(cinfer_rejected_total{{{S}}}[{R}]))", "rejected: {{reason}}"),
        ]),
    ]),
    ("Queue, batching and instances", [
        ("Pending requests per pod (HPA metric)", "short", [
            (f"sum by (pod) (cinfer_pending_requests{{{S}}})", "{{pod}}"),
        ]),
        ("Batch size (mean and P90)", "short", [
            (f"sum(rate(cinfer_batch_size_sum{{{S}}}[{R}])) / sum(rate(cinfer_batch_size_count{{{S}}}[{R}]))",
             "mean"),
            (q(0.9, "cinfer_batch_size"), "P90"),
            (f"sum(rate(cinfer_inference_count_total{{{S}}}[{R}])) / "
             f"sum(rate(cinfer_execution_count_total{{{S}}}[{R}]))", "inferences per execution"),
        ]),
        ("Instance busy ratio", "percentunit", [
            (f"avg by (pod, instance) (cinfer_instance_busy_ratio{{{S}}})", "{{pod}} {{instance}}"),
        ]),
        ("Ready replicas", "short", [
            ('count(up{job="cinfer-server", namespace=~"$namespace"} == 1)', "up"),
            ('count(up{job="cinfer-server", namespace=~"$namespace"})', "scraped"),
        ]),
    ]),
    ("GPU and process", [
        ("GPU utilisation", "percentunit", [
            ('avg by (pod, gpu) (cinfer_gpu_utilization_ratio{namespace=~"$namespace"})', "{{pod}} gpu{{gpu}}"),
        ]),
        ("GPU memory used", "percentunit", [
            ('max by (pod, gpu) (cinfer_gpu_memory_used_bytes{namespace=~"$namespace"} '
             '/ cinfer_gpu_memory_total_bytes{namespace=~"$namespace"})', "{{pod}} gpu{{gpu}}"),
        ]),
        ("Process CPU (cores)", "short", [
            (f'sum by (pod) (rate(cinfer_process_cpu_seconds_total{{namespace=~"$namespace"}}[{R}]))', "{{pod}}"),
        ]),
        ("Process resident memory", "bytes", [
            ('sum by (pod) (cinfer_process_resident_memory_bytes{namespace=~"$namespace"})', "{{pod}}"),
        ]),
    ]),
    ("LLM", [
        ("Tokens/s", "short", [
            (f"sum(rate(cinfer_llm_generation_tokens_total{{{S}}}[{R}]))", "generated"),
            (f"sum(rate(cinfer_llm_prompt_tokens_total{{{S}}}[{R}]))", "prompt"),
        ]),
        ("Time to first token P50 / P99", "s", [
            (q(0.5, "cinfer_llm_time_to_first_token_seconds"), "P50"),
            (q(0.99, "cinfer_llm_time_to_first_token_seconds"), "P99"),
        ]),
        ("Inter-token latency P50 / P99", "s", [
            (q(0.5, "cinfer_llm_inter_token_latency_seconds"), "P50"),
            (q(0.99, "cinfer_llm_inter_token_latency_seconds"), "P99"),
        ]),
        ("Sequences running / waiting (HPA metrics)", "short", [
            (f"sum by (pod) (cinfer_llm_running_sequences{{{S}}})", "running {{pod}}"),
            (f"sum by (pod) (cinfer_llm_waiting_sequences{{{S}}})", "waiting {{pod}}"),
        ]),
        ("KV cache usage and prefix cache hit ratio", "percentunit", [
            (f"max by (pod) (cinfer_llm_kv_cache_usage_ratio{{{S}}})", "KV {{pod}}"),
            (f"sum(rate(cinfer_llm_prefix_cache_hits_total{{{S}}}[{R}])) / "
             f"sum(rate(cinfer_llm_prefix_cache_queries_total{{{S}}}[{R}]))", "prefix hits"),
        ]),
        ("Preemptions/s", "short", [
            (f"sum by (pod) (rate(cinfer_llm_preemptions_total{{{S}}}[{R}]))", "{{pod}}"),
        ]),
    ]),
    ("Gateway", [
        ("Gateway requests by code", "reqps", [
            ('sum by (code) (rate(cinfer_gateway_requests_total{namespace=~"$namespace", model=~"$model"}'
             f"[{R}]))", "{{code}}"),
        ]),
        ("Gateway latency P50 / P99", "s", [
            (q(0.5, "cinfer_gateway_request_duration_seconds"), "P50"),
            (q(0.99, "cinfer_gateway_request_duration_seconds"), "P99"),
        ]),
        ("Healthy upstreams", "short", [
            ('sum(max by (upstream) (cinfer_gateway_upstream_healthy{namespace=~"$namespace"}))', "healthy"),
        ]),
        ("Retries, ejections, rate-limited, shed (/s)", "short", [
            (f'sum(rate(cinfer_gateway_retries_total{{namespace=~"$namespace"}}[{R}]))', "retries"),
            (f'sum(rate(cinfer_gateway_ejections_total{{namespace=~"$namespace"}}[{R}]))', "ejections"),
            (f'sum(rate(cinfer_gateway_rate_limited_total{{namespace=~"$namespace"}}[{R}]))', "rate limited"),
            (f'sum(rate(cinfer_gateway_shed_total{{namespace=~"$namespace"}}[{R}]))', "shed"),
        ]),
    ]),
]


def build():
    panels, pid, y = [], 1, 0
    ds = {"type": "prometheus", "uid": "${datasource}"}
    for row_title, row in ROWS:
        panels.append({"id": pid, "type": "row", "title": row_title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        pid += 1
        y += 1
        for i, (title, unit, series) in enumerate(row):
            targets = [{"refId": chr(ord("A") + k), "datasource": ds, "expr": e,
                        "legendFormat": leg, "range": True}
                       for k, (e, leg) in enumerate(series)]
            panels.append({
                "id": pid, "type": "timeseries", "title": title, "datasource": ds,
                "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": y + 8 * (i // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom"},
                            "tooltip": {"mode": "multi"}},
                "targets": targets,
            })
            pid += 1
        y += 8 * ((len(row) + 1) // 2)

    def var(name, query, multi):
        return {"name": name, "label": name, "type": "query", "datasource": ds,
                "query": {"query": query, "refId": name}, "definition": query,
                "refresh": 2, "includeAll": multi, "multi": multi, "allValue": ".*" if multi else None,
                "current": {}, "sort": 1}

    return {
        "title": "cinfer",
        "uid": "cinfer-overview",
        "description": "cinfer inference server and gateway: traffic, latency, queues, batching, "
                       "GPU, LLM and gateway health (deploy/grafana/make_dashboard.py).",
        "tags": ["cinfer", "inference"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "browser",
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource",
             "query": "prometheus", "current": {}, "hide": 0},
            var("namespace", "label_values(cinfer_request_success_total, namespace)", False),
            var("model", 'label_values(cinfer_request_success_total{namespace=~"$namespace"}, model)', True),
        ]},
        "annotations": {"list": []},
        "panels": panels,
    }


def render():
    return json.dumps(build(), indent=2, sort_keys=False) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    text = render()
    if args.write:
        OUT.write_text(text)
        print(f"wrote {OUT}")
        return 0
    if not OUT.exists() or OUT.read_text() != text:
        print(f"{OUT} is out of date: run {__file__} --write", file=sys.stderr)
        return 1
    print(f"ok: {OUT.name} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
