"""The emitter: golden files per target and GPU vendor, byte-identical output, the schema and
systemd's own checks, hostile argv, and --check failing on edited files."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate  # the test extras carry it: its absence is a failure
import msgspec
import pytest
import yaml

from exedra_engine import Constraints, Kind, ModelSpec, plan_launch
from exedra_engine._core.emit import EmitOptions, Storage, Target, emit, emit_files
from exedra_engine._core.emit.checks import check_files
from exedra_engine._core.emit.formats import ini
from exedra_engine._core.emit.resources import GPU_RESOURCES
from exedra_engine.errors import EmitError
from tests.conftest import Run, cli, hardware_file
from tests.emit_cases import KEY, MODEL, VENDOR_HOSTS, hardware, plan_for

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "emit"
UPDATE = os.environ.get("EXEDRA_UPDATE_GOLDEN") == "1"
K8S_VERSION = "1.35"


def _emitted(tree: str, target: Target, **opts: object) -> dict[str, str]:
    plan = plan_for(tree)
    return emit_files(plan, target, EmitOptions(**opts), hardware(tree)).files  # type: ignore[arg-type]


@pytest.mark.parametrize("target", list(Target))
@pytest.mark.parametrize("tree", VENDOR_HOSTS)
def test_golden_files(tree: str, target: Target) -> None:
    files = _emitted(tree, target)
    assert len(files) == 1
    ((name, text),) = files.items()
    golden = GOLDEN / target.value / f"{tree}-{name}"
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text(), f"regenerate with EXEDRA_UPDATE_GOLDEN=1: {golden}"


@pytest.mark.parametrize("target", list(Target))
def test_equal_inputs_give_byte_identical_output_wherever_it_runs(
    target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _emitted("nvidia", target)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("LLAMA_ARG_HOST", "10.9.9.9")
    assert _emitted("nvidia", target) == first
    # and in a process of its own, with another hash seed
    code = (
        "import sys, msgspec; sys.path.insert(0, sys.argv[1]);"
        "from tests.emit.test_emit import _emitted; from exedra_engine._core.emit import Target;"
        f"e = _emitted('nvidia', Target('{target.value}'));"
        "sys.stdout.write(msgspec.json.encode(e).decode())"
    )
    root = str(Path(__file__).resolve().parents[2])
    out = subprocess.run(
        [sys.executable, "-c", code, root],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    ).stdout
    assert msgspec.json.decode(out) == first


def test_gpu_limits_by_driver_and_none_for_the_cpu() -> None:
    want = {
        "nvidia": "nvidia.com/gpu",
        "amdgpu": "amd.com/gpu",
        "intel-xe": "gpu.intel.com/xe",
        "intel-arc-dkms": "gpu.intel.com/i915",
    }
    for tree, resource in want.items():
        (text,) = _emitted(tree, Target.K8S).values()
        deploy = next(yaml.safe_load_all(text))
        c = deploy["spec"]["template"]["spec"]["containers"][0]
        assert c["resources"] == {"limits": {resource: 1}}, tree
        assert resource in GPU_RESOURCES.values()
    (text,) = _emitted("none", Target.K8S).values()
    c = next(yaml.safe_load_all(text))["spec"]["template"]["spec"]["containers"][0]
    assert "resources" not in c


def test_the_key_is_a_mounted_file_and_appears_nowhere() -> None:
    for target in Target:
        for tree in VENDOR_HOSTS:
            for text in _emitted(tree, target).values():
                assert KEY not in text
                assert "LLAMA_API_KEY" not in text
                assert "--api-key-file" in text


def _k8s_docs(text: str) -> list[dict[str, object]]:
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.mark.parametrize(
    "opts",
    [
        {},
        {"storage": Storage.IMAGE, "models_image": "registry.example/models/qwen:1"},
        {"storage": Storage.HOST, "namespace": "llm"},
    ],
    ids=["pvc", "image", "host"],
)
@pytest.mark.parametrize("tree", VENDOR_HOSTS)
def test_manifests_pass_kubernetes_validate_strict(tree: str, opts: dict[str, object]) -> None:
    (text,) = _emitted(tree, Target.K8S, **opts).values()
    for doc in _k8s_docs(text):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert check_files(plan_for(tree), Target.K8S, {"m.yaml": text}) == []


def test_the_schema_alone_passes_an_invalid_gpu_name_the_semantic_checks_do_not() -> None:
    (text,) = _emitted("nvidia", Target.K8S).values()
    bad = text.replace("nvidia.com/gpu: 1", "nvidia.com/gpu=all: 1")
    for doc in _k8s_docs(bad):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    problems = check_files(plan_for("nvidia"), Target.K8S, {"m.yaml": bad})
    assert any("'nvidia.com/gpu=all' is not a qualified name" in p for p in problems), problems


def _verify(unit: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", "verify", str(unit)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "SYSTEMD_LOG_COLOR": "0"},
    )


def _real_unit(text: str, llama_server: str) -> str:
    # ExecStart's binary must exist on the checking host: the real one, where the plan has
    # the target's path; the waiter is this interpreter (verify only checks it exists).
    return text.replace("/usr/local/bin/llama-server", llama_server).replace(
        "/usr/bin/llama-server", llama_server
    )


needs_systemd = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)


@needs_systemd
@pytest.mark.parametrize("tree", VENDOR_HOSTS)
def test_units_pass_systemd_analyze_verify_with_no_stderr(
    tree: str, tmp_path: Path, llama_server: str
) -> None:
    ((name, text),) = _emitted(tree, Target.SYSTEMD, waiter=sys.executable).items()
    unit = tmp_path / name
    unit.write_text(_real_unit(text, llama_server))
    r = _verify(unit)
    assert (r.returncode, r.stderr, r.stdout) == (0, "", "")


@needs_systemd
def test_systemd_security_exposure_is_low(tmp_path: Path, llama_server: str) -> None:
    scores = {}
    for tree in ("none", "nvidia", "amdgpu"):
        ((name, text),) = _emitted(tree, Target.SYSTEMD, waiter=sys.executable).items()
        unit = tmp_path / f"{tree}-{name}"
        unit.write_text(_real_unit(text, llama_server))
        r = subprocess.run(
            ["systemd-analyze", "security", "--offline=yes", str(unit)],
            capture_output=True,
            text=True,
            check=False,
        )
        last = r.stdout.strip().splitlines()[-1]
        scores[tree] = float(last.split("level for")[1].split(":")[1].split()[0])
    assert scores["none"] <= 1.5 and max(scores.values()) <= 2.0, scores


HOSTILE = [
    'a "quoted" word',
    "single 'quotes'",
    "back\\slash\\",
    "100%d %n %%",
    "$HOME ${PATH} $$",
    ";",
    "\\;",
    "semi;colon",
    "new\nline",
    "tab\there",
    "\x01\x1b[31m",
    "ünïcödé ✓",
    "-@:+!",
    "",
    " lead and trail ",
    "#not a comment",
    "=eq=",
]


def _hostile_plan() -> object:
    hw = hardware("none")
    spec = ModelSpec(id="qwen", path=MODEL, kind=Kind.LLAMA)
    extra: list[str] = []
    for h in HOSTILE:
        extra += ["--alias", h] if h else []
    args = tuple(a for h in HOSTILE if h for a in ("--chat-template", h))
    env = tuple(f"EXEDRA_T{i}={h}" for i, h in enumerate(HOSTILE))
    return plan_launch(
        spec,
        hw,
        Constraints(host="0.0.0.0", port=8080, extra_args=args, extra_env=env, api_key=KEY),
    ).unwrap()


@needs_systemd
def test_hostile_argv_survives_systemd_escaping(tmp_path: Path, llama_server: str) -> None:
    plan = _hostile_plan()
    e = emit_files(plan, Target.SYSTEMD, EmitOptions(waiter=sys.executable), hardware("none"))  # type: ignore[arg-type]
    ((name, text),) = e.files.items()
    unit = tmp_path / name
    unit.write_text(_real_unit(text, llama_server))
    r = _verify(unit)
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    sections = ini.read_ini(text)
    (start,) = ini.setting(sections, "Service", "ExecStart")
    argv = ini.exec_argv(start, {"d": "/run/credentials/qwen.service"})
    assert argv == [
        plan.command,  # type: ignore[attr-defined]
        *plan.args,  # type: ignore[attr-defined]
        "--api-key-file",
        "/run/credentials/qwen.service/api-key",
    ]
    env = [
        w
        for v in ini.setting(sections, "Service", "Environment")
        for w in ini.split_words(ini.resolve_specifiers(v, {}))
    ]
    assert sorted(e for e in env if e.startswith("EXEDRA_T")) == sorted(
        f"EXEDRA_T{i}={h}" for i, h in enumerate(HOSTILE)
    )
    assert check_files(plan, Target.SYSTEMD, e.files) == []  # type: ignore[arg-type]


@needs_systemd
@pytest.mark.parametrize("token", [h for h in HOSTILE if h and "/" not in h])
def test_systemd_itself_reads_each_escaped_word_back(token: str, tmp_path: Path) -> None:
    # verify names the executable it parsed: put the escaped word there, so systemd's own
    # parser (quotes, C escapes, specifiers) proves what it reads. ($$ is the one escape of
    # arguments only, expanded when the command runs: the reference reader checks it.)
    word = ini._escape("/nonexistent/" + token, dollar=False)
    unit = tmp_path / "w.service"
    unit.write_text(f"[Service]\nExecStart={word}\n")
    r = _verify(unit)
    assert "/nonexistent/" + token in r.stderr, r.stderr


def test_the_writer_refuses_what_no_escaping_writes() -> None:
    for bad in ("nul\0", "surrogate\udcff"):
        with pytest.raises(ini.Unwritable):
            ini.exec_word(bad)
    with pytest.raises(ini.Unwritable):
        ini.exec_line("relative/bin", [])
    with pytest.raises(ValueError, match="would not stay on its line"):
        ini.write_ini([("Service", [("Description", "two\nlines")])])


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (
            (
                "- /run/secrets/exedra/api-key\n",
                "- /run/secrets/exedra/api-key\n        - --api-key\n        - hunter2\n",
            ),
            "args pass --api-key with a value",
        ),
        (
            (
                "        ports:\n",
                "        env:\n        - name: LLAMA_API_KEY\n"
                "          value: hunter2\n        ports:\n",
            ),
            "env sets LLAMA_API_KEY",
        ),
        (
            ("path: /health", "path: /v1/models"),
            "startupProbe asks /v1/models, not the ready path /health",
        ),
        (("containerPort: 8080", "containerPort: 8080\n          hostPort: 8080"), "a hostPort"),
        (("targetPort: http", "targetPort: 9999"), "Service port http targets 9999"),
        (
            ("automountServiceAccountToken: false", "automountServiceAccountToken: true"),
            "automountServiceAccountToken is not false",
        ),
        (("- '8080'", "- '8081'"), "would listen on port 8081"),
        (
            (
                "---\napiVersion: v1\nkind: Service",
                "---\napiVersion: v1\nkind: Secret\nmetadata: {name: k}\n"
                "stringData: {api-key: x}\n---\napiVersion: v1\nkind: Service",
            ),
            "a Secret object",
        ),
    ],
)
def test_check_finds_an_edited_manifest(edit: tuple[str, str], said: str) -> None:
    (text,) = _emitted("nvidia", Target.K8S).values()
    assert edit[0] in text
    problems = check_files(plan_for("nvidia"), Target.K8S, {"m.yaml": text.replace(*edit, 1)})
    assert any(said in p for p in problems), problems


@pytest.mark.parametrize(
    ("target", "edit", "said"),
    [
        (Target.SYSTEMD, ('"--no-webui"', '"--no-webui" "--api-key" "x"'), "args pass --api-key"),
        (Target.SYSTEMD, ("/health", "/v1/models"), "ExecStartPost= asks /v1/models"),
        (Target.SYSTEMD, ("KillMode=mixed", "KillMode=control-group"), "KillMode= is not mixed"),
        (
            Target.SYSTEMD,
            ("LoadCredential=", 'Environment="LLAMA_API_KEY=x"\n#'),
            "env sets LLAMA_API_KEY",
        ),
        (Target.QUADLET, ("/health", "/v1/models"), "HealthCmd= asks /v1/models"),
        (Target.QUADLET, ("Notify=healthy", "Notify=true"), "Notify= is not healthy"),
        (Target.QUADLET, (",type=mount", ",type=env"), "is not type=mount"),
        (Target.QUADLET, ("TimeoutStartSec=", "#TimeoutStartSec="), "no TimeoutStartSec="),
    ],
)
def test_check_finds_an_edited_unit(target: Target, edit: tuple[str, str], said: str) -> None:
    (text,) = _emitted("nvidia", target).values()
    assert edit[0] in text
    problems = check_files(plan_for("nvidia"), target, {"u": text.replace(*edit, 1)})
    assert any(said in p for p in problems), problems


def test_a_known_key_or_the_redaction_marker_anywhere_fails() -> None:
    (text,) = _emitted("none", Target.QUADLET).values()
    plan = plan_for("none")
    assert check_files(plan, Target.QUADLET, {"u": text + f"# {KEY}\n"})[0].endswith(
        "carries the API key in plain text"
    )
    assert (
        "redaction marker" in check_files(plan, Target.QUADLET, {"u": text + "# <redacted>\n"})[0]
    )


@pytest.mark.parametrize(
    ("kw", "target", "said"),
    [
        ({"host_": "127.0.0.1"}, Target.K8S, "plan with --host 0.0.0.0"),
        ({"host_": "127.0.0.1"}, Target.QUADLET, "plan with --host 0.0.0.0"),
        ({"extra_env": ("HF_TOKEN=abc",)}, Target.SYSTEMD, "HF_TOKEN, a secret"),
        ({"extra_args": ("--hf-token", "abc")}, Target.K8S, "HF_TOKEN, a secret"),
    ],
)
def test_what_cannot_be_emitted_is_an_error(
    kw: dict[str, object], target: Target, said: str
) -> None:
    plan = plan_for("none", **kw)  # type: ignore[arg-type]
    r = emit(plan, target, hardware=hardware("none"))
    assert said in str(r.failure())
    assert "abc" not in str(r.failure())


def test_a_models_dir_that_volume_would_misread_is_refused() -> None:
    r = emit(plan_for("none"), Target.QUADLET, EmitOptions(models_dir="/var/lib/exedra/models"))
    assert r.unwrap()
    spec_path = "/srv/a:b/model.gguf"
    plan = plan_for("none", extra_args=("--model", spec_path))
    r = emit(plan, Target.QUADLET, hardware=hardware("none"))
    assert "Volume= reads as its separators" in str(r.failure())


def test_a_gpu_plan_without_its_hardware_file_says_what_to_give() -> None:
    r = emit(plan_for("nvidia"), Target.K8S)
    assert isinstance(r.failure(), EmitError)
    assert "--hardware" in str(r.failure())
    ok = emit(
        plan_for("nvidia"), Target.K8S, EmitOptions(gpu_resource="nvidia.com/gpu", gpu_count=2)
    )
    assert "nvidia.com/gpu: 2" in next(iter(ok.unwrap().files.values()))


def test_every_model_file_moves_to_the_mount() -> None:
    plan = plan_for(
        "none",
        extra_args=("--mmproj", "/var/lib/exedra/models/qwen/mmproj.gguf"),
        extra_env=("LLAMA_ARG_SPEC_DRAFT_MODEL=/var/lib/exedra/models/draft/d.gguf",),
    )
    e = emit_files(plan, Target.K8S, EmitOptions(storage=Storage.HOST), hardware("none"))
    (text,) = e.files.values()
    c = _k8s_docs(text)[0]["spec"]["template"]["spec"]["containers"][0]  # type: ignore[index]
    assert c["args"][:2] == ["--model", "/models/qwen/model.gguf"]
    assert "/models/qwen/mmproj.gguf" in c["args"]
    assert {"name": "LLAMA_ARG_SPEC_DRAFT_MODEL", "value": "/models/draft/d.gguf"} in c["env"]
    vol = _k8s_docs(text)[0]["spec"]["template"]["spec"]["volumes"][0]  # type: ignore[index]
    assert vol["hostPath"] == {"path": "/var/lib/exedra/models", "type": "Directory"}


def test_the_start_budget_is_sized_from_the_model() -> None:
    e = emit_files(plan_for("none"), Target.K8S, EmitOptions(), hardware("none"))
    budget = next(o for o in e.origins if o.field == "start budget")
    assert budget.value == "150s"  # 60 s + ceil(4.68 GB / 50 MiB/s)
    assert "60 s + model size / 50 MiB/s" in budget.why
    c = _k8s_docs(next(iter(e.files.values())))[0]["spec"]["template"]["spec"]["containers"][0]  # type: ignore[index]
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] == 150


# -- the command line ------------------------------------------------------------------------


def test_plan_json_then_emit_equals_plan_emit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hw = tmp_path / "host.json"
    hw.write_bytes(msgspec.json.encode(hardware("amdgpu")))
    monkeypatch.setenv("QWEN_KEY", KEY)
    request = [
        "plan", "--hardware", str(hw), "--model", MODEL, "--kind", "llama", "--id", "qwen",
        "--no-config", "--host", "0.0.0.0", "--port", "8080", "--no-port-check",
        "--api-key-env", "QWEN_KEY",
    ]  # fmt: skip
    code, plan_json, err = cli(*request, "--json")
    assert code == 0, err
    (tmp_path / "plan.json").write_text(plan_json)
    for target in Target:
        # A waiter a unit can reach (this checkout's venv may be under /tmp): not judged here.
        waiter = ("--waiter", "/usr/local/lib/exedra-engine/bin/exedra-engine")
        code, direct, err = cli(*request, "--emit", target.value, *waiter)
        assert code == 0, err
        code, saved, err = cli("emit", str(tmp_path / "plan.json"), "--target", target.value,
            "--hardware", str(hw), *waiter,
        )  # fmt: skip
        assert code == 0, err
        assert saved == direct
        assert KEY not in direct and "<redacted>" not in direct


def test_cli_out_check_and_explain(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_bytes(msgspec.json.encode(plan_for("none", key="")))
    out = tmp_path / "deploy"
    code, said, _ = cli("emit", str(plan), "--target", "k8s", "--out", str(out), "--explain")
    assert code == 0
    assert f"wrote {out / 'qwen.yaml'}" in said
    assert "start budget" in said and "60 s + model size / 50 MiB/s" in said
    assert "ready path" in said and "plan.ready" in said
    code, said, err = cli("emit", str(plan), "--target", "k8s", "--out", str(out), "--check")
    assert (code, err) == (0, ""), err
    manifest = out / "qwen.yaml"
    manifest.write_text(manifest.read_text().replace("path: /health", "path: /v1/models"))
    code, said, err = cli("emit", str(plan), "--target", "k8s", "--out", str(out), "--check")
    assert code == 1
    assert "differs from what the plan emits" in said
    assert "readinessProbe asks /v1/models, not the ready path /health" in err


def test_cli_emit_names_a_bad_plan_file(tmp_path: Path) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text(
        '{"spec": {"path": "/m", "kind": "llama"}, "command": "/x", "args": [], '
        '"host": "h", "port": "80", "ready": "/health"}'
    )
    code, _, err = cli("emit", str(bad), "--target", "k8s")
    assert code == 2
    assert f"{bad}: $.port: Expected `int`, got `str`" in err


def test_wait_ready_times_out_with_one_line() -> None:
    code, _, err = cli(
        "wait-ready", "http://127.0.0.1:1/health", "--timeout", "0.2", "--interval", "0.1"
    )
    assert code == 1
    assert err.count("\n") == 1 and "did not answer 200" in err


def test_plan_emit_with_a_config_file(tmp_path: Path, run: Run) -> None:
    # The CLI spread a positional (spec, hw, constraints, files) into plan_explained, whose
    # fourth parameter is the HostFiles port: with any override file, `plan --emit` crashed.
    conf = tmp_path / "conf.yaml"
    conf.write_text("env: {EXEDRA_MARK: from-config}\nengines: {llama: {args: [-c, '512']}}\n")
    hw = hardware_file(tmp_path)
    for target in ("k8s", "systemd", "quadlet"):
        r = run(
            "plan",
            "--model",
            MODEL,
            "--kind",
            "llama",
            "--hardware",
            str(hw),
            "--host",
            "0.0.0.0",
            "--port",
            "8080",
            "--no-port-check",
            "--config",
            str(conf),
            "--emit",
            target,
            # a waiter a unit can reach: this checkout's venv may be under /tmp (PrivateTmp=)
            "--waiter",
            "/usr/local/lib/exedra-engine/bin/exedra-engine",
        )
        assert r.code == 0, (target, r.err)
        assert "Traceback" not in r.err
        # The override reached the emitted files: the config was planned with, not dropped.
        assert "from-config" in r.out, target
        assert "512" in r.out, target


def test_each_target_has_its_writer_and_its_checks() -> None:
    # Kubernetes' checks are a module of their own (k8s_check); the units' sit beside their writer.
    for target, checks in (("k8s", "k8s_check"), ("systemd", "systemd"), ("quadlet", "quadlet")):
        writer = importlib.import_module(f"exedra_engine._core.emit.formats.{target}")
        checker = importlib.import_module(f"exedra_engine._core.emit.formats.{checks}")
        assert callable(getattr(writer, f"emit_{target}"))
        assert callable(getattr(checker, f"check_{target}"))
