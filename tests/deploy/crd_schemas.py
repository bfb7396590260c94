"""crd_schemas.py: JSON schemas for the custom resources cinfer ships (subset, strict).

kubernetes-validate knows only built-in kinds. For the three custom resources in deploy/ we
check against schemas written here from the CRDs' documented OpenAPI: prometheus-operator's
monitoring.coreos.com/v1 ServiceMonitor and PrometheusRule, and KEDA's keda.sh/v1alpha1
ScaledObject. They cover the fields cinfer uses, with additionalProperties false wherever we
write fields, so a misspelt or misplaced field fails; a field these CRDs accept but we do not
use also fails here (add it to the schema when the manifests start using it). The CRDs
themselves are not copied into this repository.
Invariant: types, enums and patterns follow the upstream CRDs; nothing here is looser.
"""

_DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
_LABEL_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": _LABEL_MAP,
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"type": "string"},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}
_METADATA = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                 "maxLength": 253},
        "namespace": {"type": "string"},
        "labels": _LABEL_MAP,
        "annotations": _LABEL_MAP,
    },
}


def _object(api, kind, spec):
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": api},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": spec,
        },
    }


SERVICE_MONITOR = _object("monitoring.coreos.com/v1", "ServiceMonitor", {
    "type": "object",
    "required": ["selector"],
    "additionalProperties": False,
    "properties": {
        "selector": _LABEL_SELECTOR,
        "jobLabel": {"type": "string"},
        "namespaceSelector": {
            "type": "object", "additionalProperties": False,
            "properties": {"any": {"type": "boolean"},
                           "matchNames": {"type": "array", "items": {"type": "string"}}},
        },
        "endpoints": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "port": {"type": "string"},
                    "targetPort": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                    "path": {"type": "string"},
                    "scheme": {"enum": ["http", "https"]},
                    "interval": {"type": "string", "pattern": _DURATION},
                    "scrapeTimeout": {"type": "string", "pattern": _DURATION},
                    "honorLabels": {"type": "boolean"},
                },
            },
        },
    },
})

_RULE = {
    "type": "object",
    "required": ["expr"],
    "additionalProperties": False,
    "properties": {
        "alert": {"type": "string"},
        "record": {"type": "string"},
        "expr": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "for": {"type": "string", "pattern": _DURATION},
        "keep_firing_for": {"type": "string", "minLength": 1, "pattern": _DURATION},
        "labels": _LABEL_MAP,
        "annotations": _LABEL_MAP,
    },
    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
}

PROMETHEUS_RULE = _object("monitoring.coreos.com/v1", "PrometheusRule", {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "groups": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "interval": {"type": "string", "pattern": _DURATION},
                    "limit": {"type": "integer"},
                    "rules": {"type": "array", "items": _RULE},
                },
            },
        },
    },
})

SCALED_OBJECT = _object("keda.sh/v1alpha1", "ScaledObject", {
    "type": "object",
    "required": ["scaleTargetRef", "triggers"],
    "additionalProperties": False,
    "properties": {
        "scaleTargetRef": {
            "type": "object", "required": ["name"], "additionalProperties": False,
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                           "name": {"type": "string"}, "envSourceContainerName": {"type": "string"}},
        },
        "pollingInterval": {"type": "integer", "minimum": 0},
        "cooldownPeriod": {"type": "integer", "minimum": 0},
        "initialCooldownPeriod": {"type": "integer", "minimum": 0},
        "idleReplicaCount": {"type": "integer", "minimum": 0},
        "minReplicaCount": {"type": "integer", "minimum": 0},
        "maxReplicaCount": {"type": "integer", "minimum": 0},
        "advanced": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "restoreToOriginalReplicaCount": {"type": "boolean"},
                "horizontalPodAutoscalerConfig": {
                    "type": "object", "additionalProperties": False,
                    "properties": {
                        "name": {"type": "string"},
                        # checked against the real autoscaling/v2 schema (embedded_hpa_behaviors)
                        "behavior": {"type": "object"},
                    },
                },
            },
        },
        "triggers": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["type", "metadata"],
                "additionalProperties": False,
                "properties": {
                    "type": {"type": "string"},
                    "name": {"type": "string"},
                    "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                    "useCachedMetrics": {"type": "boolean"},
                    # KEDA requires every trigger metadata value to be a string
                    "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
                    "authenticationRef": {
                        "type": "object", "required": ["name"], "additionalProperties": False,
                        "properties": {"name": {"type": "string"}, "kind": {"type": "string"}},
                    },
                },
                "if": {"properties": {"type": {"const": "prometheus"}}},
                "then": {"properties": {"metadata": {"required": ["serverAddress", "query", "threshold"]}}},
            },
        },
    },
})

SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR,
    ("monitoring.coreos.com/v1", "PrometheusRule"): PROMETHEUS_RULE,
    ("keda.sh/v1alpha1", "ScaledObject"): SCALED_OBJECT,
}


def embedded_hpa_behaviors(doc):
    """(path, behavior) pairs of HPA behaviours embedded in a custom resource."""
    if doc.get("kind") == "ScaledObject":
        beh = doc.get("spec", {}).get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior")
        if isinstance(beh, dict):
            return [("spec.advanced.horizontalPodAutoscalerConfig.behavior", beh)]
    return []
