"""Emit is confined to the model's own directory: no system, runtime, secret or home tree is
mounted, judged by what a directory is (resolved) as well as by its spelling; ``--out`` writes
only inside itself; the Quadlet container runs as a non-root user."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from exedra_engine import Constraints, Kind, ModelSpec, plan_launch
from exedra_engine._core.emit import EmitOptions, Storage, Target, emit, emit_files
from exedra_engine._core.emit.checks import check_files
from exedra_engine._core.emit.formats import ini
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.values import ModelInfo
from exedra_engine.errors import EmitError
from tests.conftest import Run
from tests.emit_cases import hardware


def _plan(path: str, *extra: str) -> LaunchPlan:
    spec = ModelSpec(id="m", path=path, kind=Kind.LLAMA)
    model = ModelInfo(path=path, size=1 << 30, architecture="qwen2")
    c = Constraints(host="0.0.0.0", port=8080, extra_args=extra)
    return plan_launch(spec, hardware("none"), c, model=model).unwrap()


def _volumes(plan: LaunchPlan, **opts: Any) -> list[str]:
    (text,) = emit_files(plan, Target.QUADLET, EmitOptions(**opts), hardware("none")).files.values()
    return ini.setting(ini.read_ini(text), "Container", "Volume")


def _host_paths(plan: LaunchPlan, **opts: Any) -> list[str]:
    import yaml

    (text,) = emit_files(
        plan, Target.K8S, EmitOptions(storage=Storage.HOST, **opts), hardware("none")
    ).files.values()
    pod = next(d for d in yaml.safe_load_all(text) if d)["spec"]["template"]["spec"]
    return [v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v]


@pytest.mark.parametrize(
    ("model", "tree"),
    [
        ("/var/run/m.gguf", "/var/run"),
        ("/run/secrets/m.gguf", "/run"),
        ("/etc/ssl/private/m.gguf", "/etc"),
        ("/var/lib/docker/volumes/x/m.gguf", "/var/lib/docker"),
        ("/home/alice/.ssh/m.gguf", "/home/alice/.ssh"),
    ],
)
@pytest.mark.parametrize("target", list(Target))
def test_a_model_in_a_runtime_or_secret_tree_is_refused_not_mounted(
    model: str, tree: str, target: Target
) -> None:
    r = emit(_plan(model), target, EmitOptions(), hardware=hardware("none"))
    err = r.failure()
    assert isinstance(err, EmitError), err
    assert f"is in {tree}" in str(err)


@pytest.mark.parametrize("home", ["/home/alice", "/var/home/alice", "/root"])
def test_a_model_directly_in_a_home_mounts_the_file_alone_never_the_home(home: str) -> None:
    plan = _plan(f"{home}/m.gguf")
    assert _volumes(plan) == [f"{home}/m.gguf:/models/0/m.gguf:ro"]
    assert _host_paths(plan) == [f"{home}/m.gguf"]


def test_a_model_in_its_own_directory_under_a_home_mounts_that_directory() -> None:
    assert _volumes(_plan("/home/alice/models/m.gguf")) == ["/home/alice/models:/models:ro"]


def test_a_system_tree_below_the_top_is_never_mounted_whole() -> None:
    # /var/lib holds every service's state, /usr/local a second system.
    assert _volumes(_plan("/var/lib/m.gguf")) == ["/var/lib/m.gguf:/models/0/m.gguf:ro"]
    assert _volumes(_plan("/usr/local/m.gguf")) == ["/usr/local/m.gguf:/models/0/m.gguf:ro"]


def test_a_directory_is_judged_by_where_it_resolves() -> None:
    # /data/m spells an ordinary directory; this machine says it is a link to a home.
    real = (("/data/m", "/home/alice"), ("/data/m/x.gguf", "/home/alice/x.gguf"))
    plan = _plan("/data/m/x.gguf")
    assert _volumes(plan) == ["/data/m:/models:ro"]
    assert _volumes(plan, real_paths=real) == ["/data/m/x.gguf:/models/0/x.gguf:ro"]
    secret = (("/data/k", "/run/secrets"), ("/data/k/x.gguf", "/run/secrets/x.gguf"))
    r = emit(_plan("/data/k/x.gguf"), Target.K8S, EmitOptions(real_paths=secret))
    assert isinstance(r.failure(), EmitError)
    assert "resolves to /run/secrets/x.gguf" in str(r.failure())


def test_a_models_dir_that_resolves_to_a_home_is_refused() -> None:
    real = (("/data/m", "/home/alice"),)
    r = emit(
        _plan("/data/m/x.gguf"), Target.QUADLET, EmitOptions(models_dir="/data/m", real_paths=real)
    )
    assert isinstance(r.failure(), EmitError)
    assert "resolves to /home/alice" in str(r.failure())


def test_the_command_line_resolves_links_before_judging(
    run: Run, tmp_path: Path, tiny_llama: Path
) -> None:
    link = tmp_path / "models"
    link.symlink_to("/etc")
    r = run("plan", "--model", f"{link}/ssl/m.gguf", "--kind", "llama", "--no-config",
            "--no-port-check", "--port", "8080", "--emit", "quadlet")  # fmt: skip
    assert r.code == 2, r.out
    assert "resolves to /etc/ssl/m.gguf" in r.err and "is in /etc" in r.err
    assert "Volume=" not in r.out


def test_check_finds_an_edited_mount_of_a_runtime_or_home_tree() -> None:
    plan = _plan("/srv/models/m.gguf")
    (unit,) = emit_files(plan, Target.QUADLET, EmitOptions()).files.values()
    for bad in ("/var/run", "/run/secrets", "/home/alice/.ssh"):
        edited = unit.replace("Volume=/srv/models:", f"Volume={bad}:")
        problems = check_files(plan, Target.QUADLET, {"u": edited})
        assert any(f"mounts the host's {bad}" in p for p in problems), problems


def test_the_quadlet_container_runs_as_a_non_root_user() -> None:
    plan = _plan("/srv/models/m.gguf")
    (unit,) = emit_files(plan, Target.QUADLET, EmitOptions()).files.values()
    s = ini.read_ini(unit)
    assert ini.setting(s, "Container", "User") == ["65532"]
    assert ini.setting(s, "Container", "Group") == ["65532"]
    (unit,) = emit_files(plan, Target.QUADLET, EmitOptions(uid=1234)).files.values()
    assert ini.setting(ini.read_ini(unit), "Container", "User") == ["1234"]
    rooted = "\n".join(x for x in unit.splitlines() if not x.startswith(("User=", "Group=")))
    assert any("runs as root" in p for p in check_files(plan, Target.QUADLET, {"u": rooted}))
    as_root = unit.replace("User=1234", "User=0")
    assert any("runs as root" in p for p in check_files(plan, Target.QUADLET, {"u": as_root}))


def test_the_quadlet_key_is_readable_by_the_containers_user() -> None:
    plan = _plan("/srv/models/m.gguf")
    plan = plan_launch(
        plan.spec, hardware("none"),
        Constraints(host="0.0.0.0", port=8080, api_key="sk-test-0123456789"),
        model=plan.model,
    ).unwrap()  # fmt: skip
    (unit,) = emit_files(plan, Target.QUADLET, EmitOptions()).files.values()
    (secret,) = ini.setting(ini.read_ini(unit), "Container", "Secret")
    assert "uid=65532,gid=65532,mode=0400" in secret


def _emit_out(run: Run, tmp_path: Path, out: Path) -> Any:
    return run("plan", "--model", "/srv/models/m.gguf", "--kind", "llama", "--id", "m",
               "--no-config", "--no-port-check", "--port", "8080", "--emit", "quadlet",
               "--out", str(out))  # fmt: skip


def test_out_never_writes_through_a_symlink_in_the_out_dir(run: Run, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (out / "m.container").symlink_to(victim)
    r = _emit_out(run, tmp_path, out)
    assert r.code == 2, r.out
    assert "symbolic link" in r.err and "not written over" in r.err
    assert victim.read_text() == "precious\n"
    assert os.path.islink(out / "m.container")


def test_out_replaces_a_hard_link_without_touching_the_other_name(run: Run, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    os.link(victim, out / "m.container")
    r = _emit_out(run, tmp_path, out)
    assert r.code == 0, r.err
    assert victim.read_text() == "precious\n"
    assert "[Container]" in (out / "m.container").read_text()
    assert [p.name for p in out.iterdir()] == ["m.container"]  # no temporary file left


def test_out_refuses_a_fifo_where_a_file_goes(run: Run, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "m.container")
    r = _emit_out(run, tmp_path, out)
    assert r.code == 2 and "not a regular file" in r.err


def test_a_path_below_a_link_resolves_through_it() -> None:
    # Only the link is named: /data/m -> /, so /data/m/sub is /sub and /data/m is the root.
    real = (("/data/m", "/"),)
    assert _volumes(_plan("/data/m/x.gguf"), real_paths=real) == [
        "/data/m/x.gguf:/models/0/x.gguf:ro"
    ]
    r = emit(_plan("/data/m/etc/x.gguf"), Target.K8S, EmitOptions(real_paths=real))
    assert isinstance(r.failure(), EmitError) and "resolves to /etc/x.gguf" in str(r.failure())
