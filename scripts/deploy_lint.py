#!/usr/bin/env python3
"""Checks behind scripts/deploy-lint (run that, not this). Needs PyYAML, jsonschema and
kubernetes-validate, which scripts/deploy-lint installs into .cache/deploy-lint/venv.

Subcommands:
  validate FILE...           every object of each rendered kustomize output (FILE is
                             <target>.yaml) against the Kubernetes schemas of each
                             K8S_VERSIONS, offline, strict (unknown fields are errors); custom
                             resources against the small schemas below; then the cross-object
                             checks (grace periods vs. lease and drain, probe ports, the
                             PrometheusRule vs. deploy/observability/alerts.yml).
  checkov WAIVERS JSON...    failed checkov checks, minus the waived ones; fails on any left,
                             on a waiver without a reason, and on a waiver that matched nothing.
                             JSON is <target>.json (checkov --output json).
  rules-check                k8s/base/prometheusrule.yaml spec.groups == alerts.yml groups.
  rules-sync                 rewrite k8s/base/prometheusrule.yaml from alerts.yml.
"""

import json
import os
import re
import sys

import jsonschema
import kubernetes_validate
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALERTS = os.path.join(ROOT, "deploy", "observability", "alerts.yml")
RULE = os.path.join(ROOT, "k8s", "base", "prometheusrule.yaml")
# The oldest and the newest Kubernetes minor the manifests are checked against.
K8S_VERSIONS = os.environ.get("DEPLOY_LINT_K8S_VERSIONS", "1.30.0 1.37.0").split()

failures = []


def fail(message):
    failures.append(message)
    print(f"  FAIL {message}")


def finish():
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)


# ---------------------------------------------------------------- custom resources
# Kubernetes' own schemas do not know these kinds. Their real CRD schemas are large and are not
# bundled anywhere offline, so each gets a small schema of the fields taskgate uses, strict
# where a typo would silently disable something (unknown keys are errors).

_STR = {"type": "string", "minLength": 1}
_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": _STR, "namespace": _STR, "labels": _STR_MAP, "annotations": _STR_MAP},
    "additionalProperties": False,
}
_LABEL_SELECTOR = {
    "type": "object",
    "properties": {"matchLabels": _STR_MAP, "matchExpressions": {"type": "array"}},
    "additionalProperties": False,
}
_DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}

def _resource(spec):
    """A custom resource's schema: the usual envelope around a schema of its `spec`."""
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {"apiVersion": _STR, "kind": _STR, "metadata": _METADATA, "spec": spec},
        "additionalProperties": False,
    }


CUSTOM_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): _resource({
        "type": "object",
        "required": ["selector", "endpoints"],
        "properties": {
            "selector": _LABEL_SELECTOR,
            "namespaceSelector": {"type": "object"},
            "jobLabel": _STR,
            "podTargetLabels": {"type": "array", "items": _STR},
            "endpoints": {
                "type": "array", "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["port"],
                    "properties": {
                        "port": _STR, "path": {"type": "string", "pattern": "^/"},
                        "scheme": {"enum": ["http", "https"]},
                        "interval": _DURATION, "scrapeTimeout": _DURATION,
                        "honorLabels": {"type": "boolean"},
                        "relabelings": {"type": "array"}, "metricRelabelings": {"type": "array"},
                    },
                    "additionalProperties": False,
                },
            },
        },
        "additionalProperties": False,
    }),
    ("monitoring.coreos.com/v1", "PrometheusRule"): _resource({
        "type": "object",
        "required": ["groups"],
        "properties": {
            "groups": {
                "type": "array", "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["name", "rules"],
                    "properties": {
                        "name": _STR, "interval": _DURATION,
                        "rules": {
                            "type": "array", "minItems": 1,
                            "items": {
                                "type": "object",
                                "required": ["expr"],
                                "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
                                "properties": {
                                    "alert": _STR, "record": _STR, "expr": _STR, "for": _DURATION,
                                    "keep_firing_for": _DURATION,
                                    "labels": _STR_MAP, "annotations": _STR_MAP,
                                },
                                "additionalProperties": False,
                            },
                        },
                    },
                    "additionalProperties": False,
                },
            },
        },
        "additionalProperties": False,
    }),
    ("keda.sh/v1alpha1", "ScaledObject"): _resource({
        "type": "object",
        "required": ["scaleTargetRef", "triggers"],
        "properties": {
            "scaleTargetRef": {
                "type": "object", "required": ["name"],
                "properties": {"apiVersion": _STR, "kind": _STR, "name": _STR},
                "additionalProperties": False,
            },
            "pollingInterval": {"type": "integer", "minimum": 1},
            "cooldownPeriod": {"type": "integer", "minimum": 0},
            "initialCooldownPeriod": {"type": "integer", "minimum": 0},
            "minReplicaCount": {"type": "integer", "minimum": 0},
            "maxReplicaCount": {"type": "integer", "minimum": 1},
            "idleReplicaCount": {"type": "integer", "minimum": 0},
            "fallback": {
                "type": "object", "required": ["failureThreshold", "replicas"],
                "properties": {"failureThreshold": {"type": "integer", "minimum": 1},
                               "replicas": {"type": "integer", "minimum": 0},
                               "behavior": _STR},
                "additionalProperties": False,
            },
            "advanced": {"type": "object"},
            "triggers": {
                "type": "array", "minItems": 1,
                "items": {
                    "type": "object", "required": ["type", "metadata"],
                    "properties": {
                        "type": _STR, "name": _STR, "metadata": _STR_MAP,
                        "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                        "authenticationRef": {"type": "object"},
                        "useCachedMetrics": {"type": "boolean"},
                    },
                    "additionalProperties": False,
                },
            },
        },
        "additionalProperties": False,
    }),
}

# The keys each trigger type needs (KEDA's scaler documentation).
TRIGGER_KEYS = {
    "prometheus": {"serverAddress", "query", "threshold"},
    "redis-streams": {"stream", "consumerGroup"},
}


def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def name_of(obj):
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


def validate_object(target, obj):
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key in CUSTOM_SCHEMAS:
        errors = sorted(jsonschema.Draft202012Validator(CUSTOM_SCHEMAS[key]).iter_errors(obj), key=str)
        for e in errors:
            fail(f"{target}: {name_of(obj)} ({key[0]} schema subset): {e.message} at /{'/'.join(map(str, e.absolute_path))}")
        if obj["kind"] == "ScaledObject":
            for trigger in obj.get("spec", {}).get("triggers", []):
                missing = TRIGGER_KEYS.get(trigger.get("type"), set()) - set(trigger.get("metadata", {}))
                if missing:
                    fail(f"{target}: {name_of(obj)}: trigger {trigger.get('type')} lacks {sorted(missing)}")
        return "custom schema"
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError as e:
            fail(f"{target}: {name_of(obj)}: {e.message} (and no custom schema here)")
            return "?"
        except kubernetes_validate.ValidationError as e:
            fail(f"{target}: {name_of(obj)} (Kubernetes {version}): {e.message} at /{'/'.join(map(str, e.absolute_path))}")
    return "k8s " + "+".join(v.rsplit(".", 1)[0] for v in K8S_VERSIONS)


# ---------------------------------------------------------------- cross-object checks

def env_of(container, configmaps):
    """The container's environment as the pod sees it (envFrom ConfigMaps, then env values)."""
    env = {}
    for source in container.get("envFrom", []):
        ref = source.get("configMapRef", {}).get("name")
        if ref is not None:
            env.update(configmaps.get(ref, {}))
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            env.setdefault(item["name"], None)
    return env


def flag(args, name):
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def named_port(container, port):
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    return None


def check_probes(target, deployment, container, listen_port):
    for probe in ("readinessProbe", "livenessProbe"):
        http = container.get(probe, {}).get("httpGet")
        if not http:
            fail(f"{target}: {name_of(deployment)}: no HTTP {probe}")
            continue
        if named_port(container, http["port"]) != listen_port:
            fail(f"{target}: {name_of(deployment)}: {probe} port {http['port']} is not the listen port {listen_port}")
    if container["readinessProbe"]["httpGet"]["path"] != "/readyz" or container["livenessProbe"]["httpGet"]["path"] != "/healthz":
        fail(f"{target}: {name_of(deployment)}: readiness must be /readyz and liveness /healthz")


POOL_NAME = re.compile(r"[a-z0-9-]{1,32}")


def cross_check_worker(target, wk, configmaps, gw_env):
    wk_spec = wk["spec"]["template"]["spec"]
    wk_c = wk_spec["containers"][0]
    wk_env = env_of(wk_c, configmaps)
    metrics = wk_env.get("TASKGATE_METRICS_LISTEN") or flag(wk_c.get("args", []), "--metrics-listen")
    if not metrics:
        fail(f"{target}: {name_of(wk)} has no TASKGATE_METRICS_LISTEN / --metrics-listen (its probes need it)")
    else:
        check_probes(target, wk, wk_c, port_of(metrics))
    lease_s = int(wk_env.get("TASKGATE_LEASE_MS") or 30000) / 1000
    drain_s = int(wk_env.get("TASKGATE_DRAIN_GRACE_MS") or 20000) / 1000
    grace = wk_spec.get("terminationGracePeriodSeconds", 30)
    if grace <= lease_s + drain_s:
        fail(f"{target}: {name_of(wk)}: terminationGracePeriodSeconds {grace} must exceed lease ({lease_s} s) + drain grace ({drain_s} s)")
    for key in ("TASKGATE_NAMESPACE", "TASKGATE_QUEUE_SHARDS"):
        if gw_env.get(key) != wk_env.get(key):
            fail(f"{target}: {key} differs between gateway ({gw_env.get(key)}) and {name_of(wk)} ({wk_env.get(key)})")


# Secrets an overlay expects to be created outside kustomize (docs/kubernetes.md).
EXTERNAL_SECRETS = {
    "production": {"taskgate-secrets"},
    "keda": {"taskgate-secrets"},
    "pools": {"taskgate-secrets", "taskgate-upstream-github"},
}


def cross_checks(target, docs):
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d.get("kind") == "ConfigMap"}
    deployments = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "Deployment"}
    # Workers: taskgate-worker, or one Deployment per pool (overlays/pools).
    workers = [d for d in deployments.values()
               if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "worker"]
    if "taskgate-gateway" not in deployments:
        fail(f"{target}: no Deployment taskgate-gateway")
        return
    if not workers:
        fail(f"{target}: no worker Deployment (taskgate-worker, or one per pool)")
        return
    gw = deployments["taskgate-gateway"]
    gw_spec = gw["spec"]["template"]["spec"]
    gw_c = gw_spec["containers"][0]
    gw_env = env_of(gw_c, configmaps)
    listen = flag(gw_c.get("args", []), "--listen") or gw_env.get("TASKGATE_LISTEN") or "127.0.0.1:8080"
    if listen.startswith("127.") or listen.startswith("localhost"):
        fail(f"{target}: gateway listens on {listen}, unreachable from its Service")
    check_probes(target, gw, gw_c, port_of(listen))
    auth = flag(gw_c.get("args", []), "--auth") or gw_env.get("TASKGATE_AUTH")
    if auth not in ("jwt", "api-keys"):
        fail(f"{target}: gateway --auth is {auth!r}; a cluster deployment needs jwt or api-keys")
    inline_s = int(gw_env.get("TASKGATE_INLINE_TIMEOUT_MS") or 60000) / 1000
    delay_s = int(gw_env.get("TASKGATE_SHUTDOWN_DELAY_MS") or 0) / 1000
    if delay_s <= 0:
        fail(f"{target}: gateway has no TASKGATE_SHUTDOWN_DELAY_MS: it would stop accepting before load balancers notice")
    if gw_spec.get("terminationGracePeriodSeconds", 30) <= inline_s + delay_s:
        fail(f"{target}: gateway terminationGracePeriodSeconds must exceed the shutdown delay ({delay_s} s) + inline timeout ({inline_s} s)")
    if "TASKGATE_REDIS_URL" not in gw_env:
        fail(f"{target}: gateway has no TASKGATE_REDIS_URL")

    pools = {}
    for wk in workers:
        cross_check_worker(target, wk, configmaps, gw_env)
        pool = env_of(wk["spec"]["template"]["spec"]["containers"][0], configmaps).get("TASKGATE_POOL") or "default"
        if not POOL_NAME.fullmatch(pool):
            fail(f"{target}: {name_of(wk)}: TASKGATE_POOL {pool!r} is not a pool name ([a-z0-9-], 1 to 32)")
        if pool in pools:
            # Two Deployments of one pool would each scale on the same backlog.
            fail(f"{target}: {name_of(wk)} and {name_of(pools[pool])} are both pool {pool!r}")
        pools[pool] = wk

    for d in docs:
        if d.get("kind") in ("Deployment", "StatefulSet"):
            pod = d["spec"]["template"]["spec"]
            for c in pod.get("containers", []) + pod.get("initContainers", []):
                sc = c.get("securityContext", {})
                ok = (sc.get("allowPrivilegeEscalation") is False and sc.get("readOnlyRootFilesystem") is True
                      and sc.get("capabilities", {}).get("drop") == ["ALL"]
                      and (sc.get("runAsNonRoot") or pod.get("securityContext", {}).get("runAsNonRoot"))
                      and (sc.get("seccompProfile") or pod.get("securityContext", {}).get("seccompProfile")))
                if not ok:
                    fail(f"{target}: {name_of(d)} container {c['name']}: securityContext is not the restricted one")
                if not c.get("resources", {}).get("limits") or not c.get("resources", {}).get("requests"):
                    fail(f"{target}: {name_of(d)} container {c['name']}: resource requests and limits needed")

    # References resolve: ConfigMaps and Secrets used by pods, selectors of Services and
    # PodDisruptionBudgets, targets of autoscalers. (production and keda expect the Secret to be
    # created outside kustomize.)
    secrets = {d["metadata"]["name"] for d in docs if d.get("kind") == "Secret"}
    external_secrets = EXTERNAL_SECRETS.get(target, set())
    workloads = [d for d in docs if d.get("kind") in ("Deployment", "StatefulSet")]
    for w in workloads:
        pod = w["spec"]["template"]["spec"]
        for c in pod.get("containers", []):
            for source in c.get("envFrom", []):
                ref = source.get("configMapRef", {}).get("name")
                if ref is not None and ref not in configmaps:
                    fail(f"{target}: {name_of(w)} uses ConfigMap {ref}, which is not rendered")
            for item in c.get("env", []):
                ref = item.get("valueFrom", {}).get("secretKeyRef", {}).get("name")
                if ref is not None and ref not in secrets | external_secrets:
                    fail(f"{target}: {name_of(w)} uses Secret {ref}, which is not rendered")
        for v in pod.get("volumes", []):
            ref = v.get("secret", {}).get("secretName")
            if ref is not None and ref not in secrets | external_secrets:
                fail(f"{target}: {name_of(w)} mounts Secret {ref}, which is not rendered")

    def selects(selector, w):
        labels = w["spec"]["template"]["metadata"].get("labels", {})
        return bool(selector) and all(labels.get(k) == v for k, v in selector.items())

    for d in docs:
        kind = d.get("kind")
        selector = None
        if kind == "Service":
            selector = d["spec"].get("selector")
        elif kind == "PodDisruptionBudget":
            selector = d["spec"]["selector"].get("matchLabels")
        if selector is not None and not any(selects(selector, w) for w in workloads):
            fail(f"{target}: {name_of(d)} selects no pods ({selector})")
        if kind in ("HorizontalPodAutoscaler", "ScaledObject"):
            ref = d["spec"]["scaleTargetRef"]["name"]
            if ref not in {w["metadata"]["name"] for w in workloads}:
                fail(f"{target}: {name_of(d)} scales {ref}, which is not rendered")
            elif deployments.get(ref, {}).get("spec", {}).get("replicas") is not None:
                # Every `kubectl apply` would reset the count the autoscaler chose.
                fail(f"{target}: {name_of(d)} scales {ref}, whose manifest still fixes spec.replicas")
            if ref == "taskgate-gateway" and kind == "HorizontalPodAutoscaler" and d["spec"].get("minReplicas", 1) < 2:
                fail(f"{target}: the gateway autoscaler must keep at least 2 replicas")

    # The rendered rule is the one in k8s/base (which `rules-check` compares with alerts.yml).
    # (The dev overlay leaves the monitoring objects out: dev clusters seldom have their CRDs.)
    rules = [d for d in docs if d.get("kind") == "PrometheusRule"]
    monitors = sorted(d["metadata"]["name"] for d in docs if d.get("kind") == "ServiceMonitor")
    if target != "dev":
        if len(rules) != 1:
            fail(f"{target}: expected one PrometheusRule, found {len(rules)}")
        if monitors != ["taskgate-gateway", "taskgate-worker"]:
            fail(f"{target}: expected the ServiceMonitors taskgate-gateway and taskgate-worker, found {monitors}")
    for rule in rules:
        if rule.get("spec") != load_docs(RULE)[0].get("spec"):
            fail(f"{target}: the rendered PrometheusRule's spec differs from k8s/base/prometheusrule.yaml")


def alert_groups():
    with open(ALERTS) as f:
        return yaml.safe_load(f)["groups"]


def compare_rules(where, rule):
    want, got = alert_groups(), rule.get("spec", {}).get("groups") or []
    if got != want:
        got_by_name = {g.get("name"): g for g in got}
        want_by_name = {g.get("name"): g for g in want}
        differ = sorted(n for n in set(got_by_name) | set(want_by_name) if got_by_name.get(n) != want_by_name.get(n))
        fail(f"{where}: PrometheusRule {rule['metadata']['name']} spec.groups differ from "
             f"deploy/observability/alerts.yml (groups {differ or 'in another order'}); "
             f"run `scripts/deploy-lint --sync-rules`")


def cmd_validate(paths):
    for path in paths:
        target = os.path.splitext(os.path.basename(path))[0]
        docs = load_docs(path)
        kinds = {}
        for obj in docs:
            how = validate_object(target, obj)
            kinds.setdefault(how, []).append(obj["kind"])
        summary = "; ".join(f"{how}: {len(ks)}" for how, ks in sorted(kinds.items()))
        cross_checks(target, docs)
        print(f"  {target}: {len(docs)} objects ({summary})")
    finish()


# ---------------------------------------------------------------- checkov

def failed_checks(report):
    reports = report if isinstance(report, list) else [report]
    for r in reports:
        if not isinstance(r, dict):
            continue
        summary = r.get("summary", {})
        if summary.get("parsing_errors"):
            fail(f"checkov could not parse {summary['parsing_errors']} file(s)")
        for check in r.get("results", {}).get("failed_checks", []):
            yield check


def cmd_checkov(waiver_path, reports):
    with open(waiver_path) as f:
        waivers = (yaml.safe_load(f) or {}).get("waivers", [])
    used = [0] * len(waivers)
    for i, w in enumerate(waivers):
        if not str(w.get("reason", "")).strip() or not w.get("check"):
            fail(f"{waiver_path}: waiver #{i + 1} needs a check id and a reason")
    total = 0
    for path in reports:
        target = os.path.splitext(os.path.basename(path))[0]
        with open(path) as f:
            text = f.read()
        try:
            report = json.loads(text)
        except json.JSONDecodeError:
            fail(f"{target}: checkov gave no JSON report (crashed?): {text[:300]!r}")
            continue
        reports = report if isinstance(report, list) else [report]
        if not any(isinstance(r, dict) and r.get("summary", {}).get("passed", 0) > 0 for r in reports):
            fail(f"{target}: checkov ran no check (nothing parsed?)")
        for check in failed_checks(report):
            total += 1
            resource = check.get("resource", "")
            waived = False
            for i, w in enumerate(waivers):
                if w.get("check") != check["check_id"]:
                    continue
                if w.get("targets") and target not in w["targets"]:
                    continue
                if w.get("resources") and not any(re.fullmatch(p, resource) for p in w["resources"]):
                    continue
                used[i] += 1
                waived = True
                break
            if not waived:
                severity = check.get("severity") or "severity n/a offline"
                lines = "-".join(map(str, check.get("file_line_range") or []))
                fail(f"{target}: {check['check_id']} ({severity}) {check.get('check_name')} -- {resource} "
                     f"[{os.path.basename(check.get('file_path', ''))}:{lines}]")
    for i, w in enumerate(waivers):
        if used[i] == 0:
            fail(f"{waiver_path}: waiver {w.get('check')} ({w.get('targets', 'all targets')}) matched nothing; remove it")
    print(f"  checkov: {total} failed check(s), {sum(used)} waived, {len(waivers)} waiver(s)")
    finish()


# ---------------------------------------------------------------- PrometheusRule sync

RULE_HEADER = """\
# GENERATED from deploy/observability/alerts.yml by `scripts/deploy-lint --sync-rules`; do not
# edit here. spec.groups must equal that file's groups (scripts/deploy-lint checks it).
# kube-prometheus-stack picks up PrometheusRules by label (by default `release: <helm
# release>`): add that label in your overlay if your Prometheus needs it.
"""


def cmd_rules_sync():
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "taskgate", "labels": {"app.kubernetes.io/name": "taskgate"}},
        "spec": {"groups": alert_groups()},
    }
    with open(RULE, "w") as f:
        f.write(RULE_HEADER)
        yaml.safe_dump(rule, f, sort_keys=False, width=100, allow_unicode=True)
    print(f"wrote {os.path.relpath(RULE, ROOT)}")


def cmd_rules_check():
    compare_rules(os.path.relpath(RULE, ROOT), load_docs(RULE)[0])
    if not failures:
        print(f"  {os.path.relpath(RULE, ROOT)}: spec.groups == deploy/observability/alerts.yml groups "
              f"({len(alert_groups())} groups)")
    finish()


def main(argv):
    if not argv:
        sys.exit(__doc__)
    cmd, args = argv[0], argv[1:]
    if cmd == "validate":
        cmd_validate(args)
    elif cmd == "checkov":
        cmd_checkov(args[0], args[1:])
    elif cmd == "rules-sync":
        cmd_rules_sync()
    elif cmd == "rules-check":
        cmd_rules_check()
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
