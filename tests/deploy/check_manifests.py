#!/usr/bin/env python3
"""check_manifests.py: render every kustomize overlay under deploy/k8s and check the result.

What is checked, for each overlay (cpu, gpu, gpu-llm, cpu-keda) and for the standalone
examples:
  1. Schema: every built-in object validates, strict (unknown fields rejected), against the
     Kubernetes JSON schemas of every release from 1.27 to the newest kubernetes-validate
     ships. Custom resources (ServiceMonitor, PrometheusRule, ScaledObject) validate against
     the subset schemas in crd_schemas.py (the CRDs themselves are not vendored).
  2. Consistency, which no schema can see: Service and PDB selectors match pods; probe and
     Service ports name real container ports; images are tagged and not placeholders; the
     grace period covers preStop + the server's exit timeout (+ margin); the gateway's
     discovery name is the headless Service; every HPA metric is one the prometheus-adapter
     rules provide; seed 001's scale-down behaviour; seed 003's liveness (30 s x 3); GPU
     overlays ask for nvidia.com/gpu with Guaranteed QoS and GPU node placement.
--self-test breaks rendered objects on purpose and requires each break to be reported, so
the checks above are known to be able to fail.

Usage: check_manifests.py --repo ROOT --kustomize "kubectl kustomize" [--self-test]
"""
import argparse
import copy
import functools
import json
import pathlib
import re
import shlex
import subprocess
import sys

import jsonschema
import kubernetes_validate
import kubernetes_validate.utils as kvu
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import crd_schemas  # noqa: E402

# kubernetes-validate re-reads and re-parses the schema files (including the multi-megabyte
# _definitions.json) on every call; the files never change during a run and the parsed
# schemas are only read, so memoise them. Cuts the run's CPU time several-fold.
kvu.schema_contents = functools.lru_cache(maxsize=None)(kvu.schema_contents)
kvu.all_versions = functools.lru_cache(maxsize=None)(kvu.all_versions)

OVERLAYS = ["cpu", "gpu", "gpu-llm", "cpu-keda"]
GPU_OVERLAYS = {"gpu", "gpu-llm"}
STANDALONE = ["deploy/k8s/examples/nfs-model-repository.yaml"]
MIN_VERSION = (1, 27)
NAMESPACE = "cinfer"
DRAIN_MARGIN_S = 10          # grace must exceed preStop + exit timeout by at least this
STARTUP_BUDGET_S = 600       # startupProbe must allow at least 10 minutes of model loading


def k8s_versions():
    seen = sorted({tuple(int(x) for x in v.split(".")[:2]) for v in kvu.all_versions()})
    vs = [f"{a}.{b}" for a, b in seen if (a, b) >= MIN_VERSION]
    if not vs:
        sys.exit("kubernetes-validate ships no schema for 1.27 or later")
    return vs


def render(repo, kustomize, overlay):
    path = repo / "deploy" / "k8s" / "overlays" / overlay
    cmd = shlex.split(kustomize) + [str(path)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stderr}")
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def key(doc):
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


# --------------------------------------------------------------------------- schema checks
_MEMO = {}      # (canonical JSON of the object, version) -> errors: overlays share most objects


def validate_schema(doc, versions, where):
    errs = []
    api = doc.get("apiVersion", "")
    kind = doc.get("kind", "")
    crd = crd_schemas.SCHEMAS.get((api, kind))
    if crd is not None:
        v = jsonschema.Draft7Validator(crd)
        for e in sorted(v.iter_errors(doc), key=lambda e: list(e.path)):
            path = ".".join(str(p) for p in e.path) or "(root)"
            errs.append(f"{where}: {key(doc)}: {path}: {e.message} (subset schema of {api} {kind})")
        for beh_path, beh in crd_schemas.embedded_hpa_behaviors(doc):
            errs += validate_hpa_behavior(beh, versions, f"{where}: {key(doc)}: {beh_path}")
        return errs
    canon = json.dumps(doc, sort_keys=True)
    for ver in versions:
        memo = _MEMO.get((canon, ver))
        if memo is None:
            memo = []
            try:
                kubernetes_validate.validate(doc, ver, strict=True)
            except kubernetes_validate.ValidationError as e:
                path = ".".join(str(p) for p in e.path) or "(root)"
                memo.append(f"Kubernetes {ver}: {path}: {e.message}")
            except kubernetes_validate.SchemaNotFoundError as e:
                memo.append(f"no schema for {api} {kind} in Kubernetes {ver}: {e}")
            _MEMO[(canon, ver)] = memo
        errs += [f"{where}: {key(doc)}: {m}" for m in memo]
    return errs


def validate_hpa_behavior(behavior, versions, where):
    """KEDA embeds an HPA behaviour: check it with the real autoscaling/v2 schema."""
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "embedded"},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"},
                    "maxReplicas": 1, "behavior": behavior}}
    return [e.replace("HorizontalPodAutoscaler/embedded: ", "") for e in validate_schema(hpa, versions, where)]


# ----------------------------------------------------------------------- semantic checks
def labels_match(selector, labels):
    ml = selector.get("matchLabels", {}) if "matchLabels" in selector or "matchExpressions" in selector \
        else selector
    if not ml and not selector.get("matchExpressions"):
        return False
    for k, v in ml.items():
        if labels.get(k) != v:
            return False
    for ex in selector.get("matchExpressions", []) or []:
        val = labels.get(ex["key"])
        op = ex["operator"]
        if op == "In" and val not in ex.get("values", []):
            return False
        if op == "NotIn" and val in ex.get("values", []):
            return False
        if op == "Exists" and val is None:
            return False
        if op == "DoesNotExist" and val is not None:
            return False
    return True


def arg_value(args, flag):
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def prestop_sleep(container):
    cmd = (container.get("lifecycle", {}).get("preStop", {}).get("exec", {}) or {}).get("command")
    if cmd and len(cmd) == 2 and cmd[0].endswith("sleep") and cmd[1].isdigit():
        return int(cmd[1])
    sl = container.get("lifecycle", {}).get("preStop", {}).get("sleep")
    if sl:
        return int(sl["seconds"])
    return None


def probe_path(probe):
    return (probe or {}).get("httpGet", {}).get("path")


def cpu_is_integer(q):
    return isinstance(q, int) or bool(re.fullmatch(r"[0-9]+", str(q)))


def adapter_metric_names(docs):
    names = set()
    for d in docs:
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("cinfer-prometheus-adapter"):
            cfg = yaml.safe_load(d["data"]["config.yaml"])
            for r in cfg.get("rules", []):
                names.add(r["name"]["as"])
    return names


def check_overlay(overlay, docs):
    errs = []
    E = errs.append
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    deployments = {d["metadata"]["name"]: d for d in by_kind.get("Deployment", [])}
    services = {d["metadata"]["name"]: d for d in by_kind.get("Service", [])}
    configmaps = {d["metadata"]["name"]: d for d in by_kind.get("ConfigMap", [])}

    for d in docs:
        md = d["metadata"]
        if d["kind"] not in ("Namespace", "PersistentVolume") and md.get("namespace") != NAMESPACE:
            E(f"{overlay}: {key(d)}: namespace is {md.get('namespace')!r}, want {NAMESPACE!r}")

    for name in ("cinfer-server", "cinfer-gateway"):
        if name not in deployments:
            E(f"{overlay}: Deployment/{name} missing")
    if errs:
        return errs

    # --- every Deployment: images, security, spread, probes' ports, volumes
    for name, dep in deployments.items():
        where = f"{overlay}: Deployment/{name}"
        spec = dep["spec"]
        pod = spec["template"]["spec"]
        plabels = spec["template"]["metadata"]["labels"]
        if not labels_match(spec["selector"], plabels):
            E(f"{where}: selector does not match the pod template labels")
        psc = pod.get("securityContext", {})
        if psc.get("runAsNonRoot") is not True:
            E(f"{where}: pod securityContext.runAsNonRoot is not true")
        if psc.get("runAsUser") in (None, 0):
            E(f"{where}: pod runs as uid {psc.get('runAsUser')!r}, want a non-root uid")
        for tsc in pod.get("topologySpreadConstraints", []):
            if not labels_match(tsc["labelSelector"], plabels):
                E(f"{where}: topologySpreadConstraint on {tsc['topologyKey']} selects other pods")
        if not pod.get("topologySpreadConstraints"):
            E(f"{where}: no topologySpreadConstraints")
        claims = {v["persistentVolumeClaim"]["claimName"] for v in pod.get("volumes", [])
                  if "persistentVolumeClaim" in v}
        pvcs = {p["metadata"]["name"] for p in by_kind.get("PersistentVolumeClaim", [])}
        for c in claims - pvcs:
            E(f"{where}: uses PersistentVolumeClaim {c} that the overlay does not create")
        for v in pod.get("volumes", []):
            if "configMap" in v and v["configMap"]["name"] not in configmaps:
                E(f"{where}: volume {v['name']} names ConfigMap {v['configMap']['name']} that does not exist")
        for c in pod["containers"]:
            cw = f"{where}: container {c['name']}"
            img = c.get("image", "")
            m = re.fullmatch(r"([a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9._/-]+(:[A-Za-z0-9._-]+)?(@sha256:[0-9a-f]{64})?", img)
            if not m or "/" not in img or not (m.group(2) or m.group(3)):
                E(f"{cw}: image {img!r} is not a registry/name:tag reference")
            elif m.group(2) == ":latest":
                E(f"{cw}: image {img!r} floats on :latest")
            csc = c.get("securityContext", {})
            if csc.get("allowPrivilegeEscalation") is not False:
                E(f"{cw}: allowPrivilegeEscalation is not false")
            if csc.get("readOnlyRootFilesystem") is not True:
                E(f"{cw}: readOnlyRootFilesystem is not true")
            if "ALL" not in (csc.get("capabilities", {}).get("drop") or []):
                E(f"{cw}: capabilities are not dropped")
            port_names = {p.get("name") for p in c.get("ports", [])}
            port_nums = {p["containerPort"] for p in c.get("ports", [])}
            for pk in ("startupProbe", "livenessProbe", "readinessProbe"):
                pr = c.get(pk)
                if pr and "httpGet" in pr:
                    port = pr["httpGet"]["port"]
                    if port not in port_names and port not in port_nums:
                        E(f"{cw}: {pk} port {port!r} is not a container port")
            if not c.get("resources", {}).get("limits", {}).get("memory"):
                E(f"{cw}: no memory limit")
            for vm in c.get("volumeMounts", []):
                if vm["name"] not in {v["name"] for v in pod.get("volumes", [])}:
                    E(f"{cw}: mounts unknown volume {vm['name']}")

    # --- the server
    srv = deployments["cinfer-server"]
    pod = srv["spec"]["template"]["spec"]
    c = next((c for c in pod["containers"] if c["name"] == "server"), None)
    w = f"{overlay}: Deployment/cinfer-server"
    if c is None:
        return errs + [f"{w}: no container named server"]
    args = c.get("args", [])
    if args[:1] != ["serve"] or arg_value(args, "--model-repository") is None:
        E(f"{w}: args do not run `cinfer serve --model-repository DIR`: {args}")
    repo_dir = arg_value(args, "--model-repository")
    if repo_dir and not any(m["mountPath"] == repo_dir and m.get("readOnly") for m in c.get("volumeMounts", [])):
        E(f"{w}: the model repository {repo_dir} is not a read-only volume mount")
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    if str(ports.get("http")) != str(arg_value(args, "--http-port")):
        E(f"{w}: container port http {ports.get('http')} != --http-port {arg_value(args, '--http-port')}")
    if str(ports.get("metrics")) != str(arg_value(args, "--metrics-port")):
        E(f"{w}: container port metrics {ports.get('metrics')} != --metrics-port {arg_value(args, '--metrics-port')}")
    ann = srv["spec"]["template"]["metadata"].get("annotations", {})
    if ann.get("prometheus.io/port") != str(ports.get("metrics")):
        E(f"{w}: prometheus.io/port annotation {ann.get('prometheus.io/port')!r} is not the metrics port")
    if probe_path(c.get("readinessProbe")) != "/v2/health/ready":
        E(f"{w}: readinessProbe is not GET /v2/health/ready")
    if probe_path(c.get("livenessProbe")) != "/v2/health/live":
        E(f"{w}: livenessProbe is not GET /v2/health/live")
    lp = c.get("livenessProbe") or {}
    if lp.get("periodSeconds") != 30 or lp.get("failureThreshold") != 3:
        E(f"{w}: livenessProbe is not every 30 s with 3 failures (seed 003)")
    sp = c.get("startupProbe")
    if probe_path(sp) not in ("/v2/health/ready", "/v2/health/live"):
        E(f"{w}: no startupProbe on the health endpoints")
    elif sp.get("periodSeconds", 10) * sp.get("failureThreshold", 3) < STARTUP_BUDGET_S:
        E(f"{w}: startupProbe allows {sp.get('periodSeconds', 10) * sp.get('failureThreshold', 3)} s "
          f"of loading, want >= {STARTUP_BUDGET_S} s")
    exit_timeout = arg_value(args, "--exit-timeout-secs")
    sleep = prestop_sleep(c)
    grace = pod.get("terminationGracePeriodSeconds", 30)
    if exit_timeout is None or not exit_timeout.isdigit():
        E(f"{w}: --exit-timeout-secs missing or not a number")
    elif sleep is None:
        E(f"{w}: no preStop sleep (endpoints and DNS need time to drop the pod)")
    elif grace < sleep + int(exit_timeout) + DRAIN_MARGIN_S:
        E(f"{w}: terminationGracePeriodSeconds {grace} < preStop {sleep} + exit timeout "
          f"{exit_timeout} + {DRAIN_MARGIN_S}")
    thr = arg_value(args, "--threads")
    if thr == "$(CINFER_THREADS)":
        env = {e["name"]: e for e in c.get("env", [])}
        ref = env.get("CINFER_THREADS", {}).get("valueFrom", {}).get("resourceFieldRef", {})
        if ref.get("resource") != "limits.cpu":
            E(f"{w}: CINFER_THREADS does not come from limits.cpu")
        if not c["resources"].get("limits", {}).get("cpu"):
            E(f"{w}: --threads follows limits.cpu but no CPU limit is set")
    res = c.get("resources", {})
    gpus = res.get("limits", {}).get("nvidia.com/gpu")
    if overlay in GPU_OVERLAYS:
        if not gpus or int(gpus) < 1:
            E(f"{w}: GPU overlay without limits nvidia.com/gpu")
        for r in ("cpu", "memory"):
            if str(res.get("requests", {}).get(r)) != str(res.get("limits", {}).get(r)):
                E(f"{w}: requests.{r} != limits.{r}: not Guaranteed QoS, no NUMA alignment")
        if not cpu_is_integer(res.get("limits", {}).get("cpu")):
            E(f"{w}: CPU limit {res.get('limits', {}).get('cpu')!r} is not whole cores")
        if not pod.get("nodeSelector"):
            E(f"{w}: GPU overlay without a nodeSelector")
        if not any(t.get("key") == "nvidia.com/gpu" for t in pod.get("tolerations", [])):
            E(f"{w}: GPU overlay does not tolerate the nvidia.com/gpu taint")
    elif gpus:
        E(f"{w}: CPU overlay asks for nvidia.com/gpu")

    # --- Services
    server_labels = srv["spec"]["template"]["metadata"]["labels"]
    for sname, svc in services.items():
        sel = svc["spec"].get("selector", {})
        targets = [dn for dn, dep in deployments.items()
                   if labels_match(sel, dep["spec"]["template"]["metadata"]["labels"])]
        if len(targets) != 1:
            E(f"{overlay}: Service/{sname} selects {len(targets)} Deployments {targets}, want 1")
            continue
        dep = deployments[targets[0]]
        cports = {p.get("name"): p["containerPort"] for cc in dep["spec"]["template"]["spec"]["containers"]
                  for p in cc.get("ports", [])}
        for p in svc["spec"]["ports"]:
            tp = p.get("targetPort", p["port"])
            if tp not in cports and tp not in cports.values():
                E(f"{overlay}: Service/{sname} port {p['name']} targets {tp!r}, not a container port")
    headless = [s for s in services.values()
                if s["spec"].get("clusterIP") == "None" and labels_match(s["spec"]["selector"], server_labels)]
    if len(headless) != 1:
        E(f"{overlay}: want exactly one headless Service over the server pods, found {len(headless)}")
    elif headless[0]["spec"].get("publishNotReadyAddresses"):
        E(f"{overlay}: the headless Service publishes not-ready pods to the gateway")

    # --- gateway and its configuration
    gw = deployments["cinfer-gateway"]
    gpod = gw["spec"]["template"]["spec"]
    gc = gpod["containers"][0]
    gw_w = f"{overlay}: Deployment/cinfer-gateway"
    gargs = gc.get("args", [])
    cfg_path = arg_value(gargs, "--config")
    if gargs[:1] != ["gateway"] or not cfg_path:
        E(f"{gw_w}: args do not run `cinfer gateway --config FILE`: {gargs}")
    else:
        mount = next((m for m in gc.get("volumeMounts", []) if cfg_path.startswith(m["mountPath"].rstrip("/") + "/")), None)
        vol = mount and next((v for v in gpod["volumes"] if v["name"] == mount["name"]), None)
        cm = vol and configmaps.get(vol.get("configMap", {}).get("name"))
        fname = cfg_path[len(mount["mountPath"].rstrip("/")) + 1:] if mount else None
        if not cm or fname not in cm.get("data", {}):
            E(f"{gw_w}: --config {cfg_path} is not a file of a mounted ConfigMap")
        else:
            try:
                cfg = json.loads(cm["data"][fname])
            except json.JSONDecodeError as e:
                E(f"{gw_w}: {fname}: invalid JSON: {e}")
                cfg = None
            if cfg is not None:
                # the gateway's own schema (docs/gateway.md): upstreams.dns[0] is
                # "name:port" or {"name", "port"}
                d0 = (cfg.get("upstreams", {}).get("dns") or [{}])[0]
                if isinstance(d0, str):
                    n0, _, p0 = d0.rpartition(":")
                    d0 = {"name": n0, "port": int(p0) if p0.isdigit() else None}
                dns = d0
                name = dns.get("name", "")
                hs = headless[0] if len(headless) == 1 else None
                ok_names = set()
                if hs:
                    n = hs["metadata"]["name"]
                    ok_names = {n, f"{n}.{NAMESPACE}", f"{n}.{NAMESPACE}.svc", f"{n}.{NAMESPACE}.svc.cluster.local"}
                if name not in ok_names:
                    E(f"{gw_w}: upstreams.dns[0].name {name!r} is not the headless Service ({sorted(ok_names)})")
                elif dns.get("port") not in [p["port"] for p in hs["spec"]["ports"]]:
                    E(f"{gw_w}: upstreams.dns[0].port {dns.get('port')} is not a port of Service/{hs['metadata']['name']}")
                gport = {p["name"]: p["containerPort"] for p in gc.get("ports", [])}.get("http")
                if cfg.get("listen", {}).get("port") != gport:
                    E(f"{gw_w}: listen.port {cfg.get('listen', {}).get('port')} != container port http {gport}")
                gports = {p["name"]: p["containerPort"] for p in gc.get("ports", [])}
                if cfg.get("listen", {}).get("grpc_port", -1) not in (-1, gports.get("grpc")):
                    E(f"{gw_w}: listen.grpc_port {cfg['listen']['grpc_port']} != container port grpc {gports.get('grpc')}")
                drain_s = int(cfg.get("listen", {}).get("drain_timeout_ms", 30000)) // 1000
                gsleep = prestop_sleep(gc) or 0
                ggrace = gpod.get("terminationGracePeriodSeconds", 30)
                if ggrace < gsleep + drain_s + DRAIN_MARGIN_S:
                    E(f"{gw_w}: terminationGracePeriodSeconds {ggrace} < preStop {gsleep} + drain {drain_s} "
                      f"+ {DRAIN_MARGIN_S}")
    if probe_path(gc.get("livenessProbe")) != "/healthz" or probe_path(gc.get("readinessProbe")) != "/readyz":
        E(f"{gw_w}: probes are not /healthz (liveness) and /readyz (readiness)")

    # --- PodDisruptionBudgets
    for pdb in by_kind.get("PodDisruptionBudget", []):
        sel = pdb["spec"]["selector"]
        n = sum(labels_match(sel, d["spec"]["template"]["metadata"]["labels"]) for d in deployments.values())
        if n != 1:
            E(f"{overlay}: {key(pdb)} selects {n} Deployments, want 1")
    if not any(labels_match(p["spec"]["selector"], server_labels) for p in by_kind.get("PodDisruptionBudget", [])):
        E(f"{overlay}: no PodDisruptionBudget covers the server")

    # --- autoscaling: exactly one of HPA (adapter metrics) or ScaledObject
    hpas = [h for h in by_kind.get("HorizontalPodAutoscaler", [])
            if h["spec"]["scaleTargetRef"]["name"] == "cinfer-server"]
    sos = [s for s in by_kind.get("ScaledObject", []) if s["spec"]["scaleTargetRef"]["name"] == "cinfer-server"]
    if len(hpas) + len(sos) != 1:
        E(f"{overlay}: {len(hpas)} HPAs and {len(sos)} ScaledObjects scale cinfer-server, want exactly 1")
    if (hpas or sos) and "replicas" in srv["spec"]:
        E(f"{overlay}: Deployment/cinfer-server sets spec.replicas although an autoscaler owns it "
          "(every apply would reset the fleet)")
    provided = adapter_metric_names(docs)
    for h in hpas:
        hw = f"{overlay}: {key(h)}"
        if h["spec"]["scaleTargetRef"].get("kind") != "Deployment":
            E(f"{hw}: does not target the Deployment")
        errs += check_behavior(h["spec"].get("behavior", {}), hw)
        if h["spec"].get("minReplicas", 1) < 2:
            E(f"{hw}: minReplicas below 2 leaves no replica during a disruption")
        for m in h["spec"].get("metrics", []):
            if m["type"] == "Pods" and m["pods"]["metric"]["name"] not in provided:
                E(f"{hw}: metric {m['pods']['metric']['name']} is not served by the prometheus-adapter rules "
                  f"({sorted(provided)})")
    for so in sos:
        sw = f"{overlay}: {key(so)}"
        beh = so["spec"].get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior", {})
        errs += check_behavior(beh, sw)

    # --- ServiceMonitors: each selects exactly one Service with the named port
    for sm in by_kind.get("ServiceMonitor", []):
        sel = sm["spec"]["selector"]
        hits = [s for s in services.values() if labels_match(sel, s["metadata"].get("labels", {}))]
        if len(hits) != 1:
            E(f"{overlay}: {key(sm)} selects {len(hits)} Services, want 1")
            continue
        names = {p["name"] for p in hits[0]["spec"]["ports"]}
        for ep in sm["spec"]["endpoints"]:
            if ep.get("port") not in names:
                E(f"{overlay}: {key(sm)} scrapes port {ep.get('port')!r}, not a port of {key(hits[0])}")
    return errs


def check_behavior(beh, where):
    errs = []
    down = beh.get("scaleDown", {})
    if down.get("stabilizationWindowSeconds") != 300:
        errs.append(f"{where}: scaleDown stabilizationWindowSeconds is {down.get('stabilizationWindowSeconds')}, "
                    "want 300 (seed 001)")
    pol = down.get("policies", [])
    if pol != [{"type": "Percent", "value": 10, "periodSeconds": 60}]:
        errs.append(f"{where}: scaleDown policies {pol}, want 10% per 60 s (seed 001)")
    return errs


def check_standalone(repo, docs_by_overlay):
    """The NFS example must bind to the claim the overlays create."""
    errs = []
    pvc = next(d for d in docs_by_overlay["cpu"] if d["kind"] == "PersistentVolumeClaim")
    for rel in STANDALONE:
        for pv in yaml.safe_load_all((repo / rel).read_text()):
            if not pv or pv["kind"] != "PersistentVolume":
                continue
            if not labels_match(pvc["spec"].get("selector", {}), pv["metadata"].get("labels", {})):
                errs.append(f"{rel}: {key(pv)} labels do not match the claim's selector")
            if pv["spec"].get("storageClassName", "") != pvc["spec"].get("storageClassName"):
                errs.append(f"{rel}: {key(pv)} storageClassName differs from the claim's")
            if not set(pvc["spec"]["accessModes"]) <= set(pv["spec"]["accessModes"]):
                errs.append(f"{rel}: {key(pv)} access modes do not cover the claim's")
    return errs


def run_all(repo, kustomize, versions, rendered=None):
    errs = []
    rendered = rendered or {ov: render(repo, kustomize, ov) for ov in OVERLAYS}
    for ov, docs in rendered.items():
        for d in docs:
            errs += validate_schema(d, versions, ov)
        errs += check_overlay(ov, docs)
    for rel in STANDALONE:
        for d in yaml.safe_load_all((repo / rel).read_text()):
            if d:
                errs += validate_schema(d, versions, rel)
    errs += check_standalone(repo, rendered)
    return errs, rendered


# ------------------------------------------------------------------------------ self-test
def find(docs, kind, name):
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(name))


def server_container(docs):
    return find(docs, "Deployment", "cinfer-server")["spec"]["template"]["spec"]["containers"][0]


def _m_unknown_field(r):
    find(r["cpu"], "Deployment", "cinfer-server")["spec"]["replica"] = 3


def _m_bad_type(r):
    server_container(r["gpu"])["ports"][0]["containerPort"] = "eight thousand"


def _m_no_readiness(r):
    del server_container(r["cpu"])["readinessProbe"]


def _m_latest(r):
    server_container(r["gpu"])["image"] = "ghcr.io/cinfer/cinfer:latest"


def _m_placeholder(r):
    server_container(r["cpu"])["image"] = "cinfer-server"


def _m_short_grace(r):
    find(r["gpu-llm"], "Deployment", "cinfer-server")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 60


def _m_no_gpu(r):
    del server_container(r["gpu"])["resources"]["limits"]["nvidia.com/gpu"]


def _m_burstable(r):
    server_container(r["gpu"])["resources"]["requests"]["cpu"] = "2"


def _m_selector(r):
    find(r["cpu"], "Service", "cinfer-server-headless")["spec"]["selector"]["app.kubernetes.io/component"] = "srv"


def _m_port(r):
    find(r["cpu"], "Service", "cinfer-gateway")["spec"]["ports"][0]["targetPort"] = "web"


def _m_hpa_metric(r):
    find(r["gpu-llm"], "HorizontalPodAutoscaler", "cinfer-server")["spec"]["metrics"][0]["pods"]["metric"]["name"] = \
        "cinfer_llm_waiting"


def _m_scale_down(r):
    find(r["cpu-keda"], "ScaledObject", "cinfer-server")["spec"]["advanced"]["horizontalPodAutoscalerConfig"][
        "behavior"]["scaleDown"]["stabilizationWindowSeconds"] = 60


def _m_gateway_dns(r):
    cm = find(r["cpu"], "ConfigMap", "cinfer-gateway-config")
    cfg = json.loads(cm["data"]["gateway.json"])
    cfg["upstreams"]["dns"][0]["name"] = "cinfer-server"
    cm["data"]["gateway.json"] = json.dumps(cfg)


def _m_liveness(r):
    server_container(r["cpu"])["livenessProbe"]["failureThreshold"] = 10


def _m_crd_field(r):
    find(r["cpu"], "ServiceMonitor", "cinfer-server")["spec"]["endpoints"][0]["intervall"] = "15s"


def _m_keda_metadata(r):
    find(r["cpu-keda"], "ScaledObject", "cinfer-server")["spec"]["triggers"][0]["metadata"]["threshold"] = 8


def _m_embedded_behavior(r):
    find(r["cpu-keda"], "ScaledObject", "cinfer-server")["spec"]["advanced"]["horizontalPodAutoscalerConfig"][
        "behavior"]["scaleUp"]["policies"][0]["type"] = 7


def _m_root(r):
    find(r["gpu"], "Deployment", "cinfer-gateway")["spec"]["template"]["spec"]["securityContext"]["runAsUser"] = 0


def _m_two_scalers(r):
    r["cpu-keda"].append(copy.deepcopy(find(r["cpu"], "HorizontalPodAutoscaler", "cinfer-server")))


def _m_fixed_replicas(r):
    find(r["gpu"], "Deployment", "cinfer-server")["spec"]["replicas"] = 3


def _m_namespace(r):
    find(r["gpu"], "PodDisruptionBudget", "cinfer-server")["metadata"]["namespace"] = "default"


MUTATIONS = [
    (_m_unknown_field, r"Kubernetes 1\.27: spec.*replica"),
    (_m_bad_type, r"containerPort"),
    (_m_no_readiness, r"readinessProbe is not GET /v2/health/ready"),
    (_m_latest, r"floats on :latest"),
    (_m_placeholder, r"not a registry/name:tag"),
    (_m_short_grace, r"terminationGracePeriodSeconds 60 < preStop 15 \+ exit timeout 120"),
    (_m_no_gpu, r"GPU overlay without limits nvidia.com/gpu"),
    (_m_burstable, r"requests.cpu != limits.cpu"),
    (_m_selector, r"Service/cinfer-server-headless selects 0 Deployments"),
    (_m_port, r"targets 'web', not a container port"),
    (_m_hpa_metric, r"cinfer_llm_waiting is not served"),
    (_m_scale_down, r"stabilizationWindowSeconds is 60"),
    (_m_gateway_dns, r"upstreams.dns\[0\].name 'cinfer-server' is not the headless"),
    (_m_liveness, r"seed 003"),
    (_m_crd_field, r"intervall"),
    (_m_keda_metadata, r"threshold.*8 is not of type 'string'|8 is not of type 'string'"),
    (_m_embedded_behavior, r"behavior.*(Kubernetes 1\.27|type)"),
    (_m_root, r"runs as uid 0"),
    (_m_two_scalers, r"1 HPAs and 1 ScaledObjects"),
    (_m_namespace, r"namespace is 'default'"),
    (_m_fixed_replicas, r"sets spec.replicas although an autoscaler owns it"),
]


def self_test(repo, kustomize, versions):
    base_errs, rendered = run_all(repo, kustomize, versions)
    if base_errs:
        print("\n".join(base_errs))
        print("self-test needs clean manifests first", file=sys.stderr)
        return 1
    failed = 0
    for fn, pattern in MUTATIONS:
        r = copy.deepcopy(rendered)
        fn(r)
        errs, _ = run_all(repo, kustomize, versions, rendered=r)
        hit = [e for e in errs if re.search(pattern, e)]
        status = "caught" if hit else "MISSED"
        print(f"{status}: {fn.__name__[3:]}: {hit[0] if hit else errs[:3]}")
        failed += not hit
    print(f"{len(MUTATIONS) - failed} passed, {failed} failed")
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", required=True, type=pathlib.Path)
    ap.add_argument("--kustomize", required=True, help='e.g. "kubectl kustomize" or "kustomize build"')
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    versions = k8s_versions()
    if args.self_test:
        return self_test(args.repo, args.kustomize, versions)
    errs, rendered = run_all(args.repo, args.kustomize, versions)
    n = sum(len(d) for d in rendered.values())
    for e in errs:
        print(e)
    print(f"{n} objects in {len(rendered)} overlays + {len(STANDALONE)} example file(s), "
          f"Kubernetes {versions[0]}..{versions[-1]}: {len(errs)} problem(s)")
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
