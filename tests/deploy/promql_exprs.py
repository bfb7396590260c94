"""promql_exprs.py: every PromQL expression cinfer's deployment ships, made concrete.

Sources: the Grafana dashboard's targets and variable queries, the prometheus-adapter rules
(seriesQuery and metricsQuery), the KEDA ScaledObject's query and the alert rules. Template
syntax is substituted the way the consuming tool does before PromQL sees the text:
  Grafana            $__rate_interval -> 1m, $namespace -> cinfer, $model -> .* (All)
                     label_values(SELECTOR, label) -> SELECTOR (the part that is PromQL)
  prometheus-adapter <<.Series>> -> the seriesQuery's metric, <<.LabelMatchers>> ->
                     namespace="cinfer",pod=~"cinfer-server-a|cinfer-server-b",
                     <<.GroupBy>> -> pod
Also: the metric names cinfer exposes (COMMON list), to catch misspelt series in queries.
"""
import json
import pathlib
import re

import yaml

# The exposition contract (names shared by the server, gateway and these manifests).
HISTOGRAMS = {
    "cinfer_request_duration_seconds", "cinfer_queue_duration_seconds",
    "cinfer_compute_duration_seconds", "cinfer_batch_size",
    "cinfer_llm_time_to_first_token_seconds", "cinfer_llm_inter_token_latency_seconds",
    "cinfer_llm_e2e_request_seconds", "cinfer_gateway_request_duration_seconds",
}
SCALARS = {
    "cinfer_request_success_total", "cinfer_request_failure_total", "cinfer_inference_count_total",
    "cinfer_execution_count_total", "cinfer_pending_requests", "cinfer_instance_busy_ratio",
    "cinfer_rejected_total", "cinfer_process_cpu_seconds_total", "cinfer_process_resident_memory_bytes",
    "cinfer_gpu_utilization_ratio", "cinfer_gpu_memory_used_bytes", "cinfer_gpu_memory_total_bytes",
    "cinfer_llm_running_sequences", "cinfer_llm_waiting_sequences", "cinfer_llm_kv_cache_usage_ratio",
    "cinfer_llm_prompt_tokens_total", "cinfer_llm_generation_tokens_total",
    "cinfer_llm_prefix_cache_queries_total", "cinfer_llm_prefix_cache_hits_total",
    "cinfer_llm_preemptions_total",
    "cinfer_gateway_requests_total", "cinfer_gateway_upstream_healthy", "cinfer_gateway_ejections_total",
    "cinfer_gateway_retries_total", "cinfer_gateway_rate_limited_total", "cinfer_gateway_shed_total",
}
KNOWN_SERIES = SCALARS | {h + s for h in HISTOGRAMS for s in ("_bucket", "_sum", "_count")}

GRAFANA_VARS = {"__rate_interval": "1m", "__interval": "1m", "__range": "1h",
                "namespace": "cinfer", "model": ".*"}
ADAPTER_MATCHERS = 'namespace="cinfer",pod=~"cinfer-server-a|cinfer-server-b"'


def grafana_subst(expr):
    expr = re.sub(r"\$\{?(\w+)\}?", lambda m: GRAFANA_VARS[m.group(1)], expr)
    m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\)\s*", expr, re.S)
    return m.group(1) if m else expr


def adapter_subst(query, series):
    return (query.replace("<<.Series>>", series)
                 .replace("<<.LabelMatchers>>", ADAPTER_MATCHERS)
                 .replace("<<.GroupBy>>", "pod"))


def collect(repo):
    """[(where, concrete PromQL)] for everything deploy/ ships."""
    repo = pathlib.Path(repo)
    out = []
    dash = json.loads((repo / "deploy/grafana/cinfer-dashboard.json").read_text())
    for p in dash["panels"]:
        for t in p.get("targets", []):
            out.append((f"dashboard panel '{p['title']}' {t['refId']}", grafana_subst(t["expr"])))
    for v in dash["templating"]["list"]:
        if v.get("type") == "query":
            out.append((f"dashboard variable ${v['name']}", grafana_subst(v["query"]["query"])))
    ad = yaml.safe_load((repo / "deploy/k8s/components/prometheus-adapter/prometheus-adapter-config.yaml").read_text())
    for r in ad["rules"]:
        series = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", r["seriesQuery"]).group(0)
        out.append((f"adapter rule {r['name']['as']} seriesQuery", r["seriesQuery"]))
        out.append((f"adapter rule {r['name']['as']} metricsQuery", adapter_subst(r["metricsQuery"], series)))
    so = yaml.safe_load((repo / "deploy/keda/scaledobject.yaml").read_text())
    for i, t in enumerate(so["spec"]["triggers"]):
        if t["type"] == "prometheus":
            out.append((f"keda trigger {i}", t["metadata"]["query"]))
    rules = yaml.safe_load((repo / "deploy/prometheus/alerts.yml").read_text())
    for g in rules["groups"]:
        for r in g["rules"]:
            out.append((f"alert {r.get('alert') or r.get('record')}", r["expr"]))
    return out


def unknown_series(expr):
    """cinfer_* names in expr that cinfer does not expose (or misuses as histogram parts)."""
    names = set(re.findall(r"\bcinfer_[a-z0-9_]+", expr))
    return sorted(n for n in names if n not in KNOWN_SERIES)
