"""The policy store: reload on change, refuse bad files, keep the last good policy."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import pytest

from quotaguard.metrics.registry import REGISTRY
from quotaguard.policy.problems import PolicyInvalid
from quotaguard.serve.policystore import PolicyNotLoaded, PolicyStore

from .conftest import SAMPLE_POLICY


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def renamed(text: str, name: str) -> str:
    return text.replace("name: gpu-platform", f"name: {name}", 1)


def test_not_ready_until_loaded(tmp_path: Path) -> None:
    store = PolicyStore(tmp_path / "missing.yaml")
    assert not store.ready
    assert store.generation == 0
    with pytest.raises(PolicyNotLoaded):
        _ = store.policy
    with pytest.raises(OSError):
        store.load()
    assert not store.ready


def test_invalid_policy_at_start_raises_with_located_problems(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(SAMPLE_POLICY.read_text().replace("slices: 1\n", "slices: 9\n", 1))
    with pytest.raises(PolicyInvalid) as caught:
        PolicyStore(path).load()
    assert f"{path}:" in str(caught.value)


def test_changed_file_is_reloaded_and_counted(policy_file: Path, store: PolicyStore) -> None:
    reloads = metric("quotaguard_policy_reloads_total")
    assert store.policy.name == "gpu-platform"
    assert store.reload_if_changed() is False  # nothing changed
    policy_file.write_text(renamed(policy_file.read_text(), "second"))
    assert store.reload_if_changed() is True
    assert store.policy.name == "second"
    assert store.generation == 2
    assert metric("quotaguard_policy_reloads_total") == reloads + 1
    assert metric("quotaguard_policy_generation") == 2


def test_rewrite_with_same_size_and_mtime_is_still_seen(
    policy_file: Path, store: PolicyStore
) -> None:
    stat = policy_file.stat()
    text = policy_file.read_text()
    policy_file.write_text(renamed(text, "gpu-platfor2"))  # same length
    os.utime(policy_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert store.reload_if_changed() is True
    assert store.policy.name == "gpu-platfor2"


def test_invalid_change_is_refused_logged_once_and_last_good_kept(
    policy_file: Path, store: PolicyStore, caplog: pytest.LogCaptureFixture
) -> None:
    failures = metric("quotaguard_policy_reload_failures_total", reason="invalid")
    good = store.policy
    policy_file.write_text(policy_file.read_text().replace("weight: 2\n", "weight: -2\n", 1))
    with caplog.at_level(logging.ERROR, logger="quotaguard.policy"):
        assert store.reload_if_changed() is False
        assert store.reload_if_changed() is False  # the same bad file: not counted again
    assert store.policy is good
    assert store.generation == 1
    assert store.ready
    assert metric("quotaguard_policy_reload_failures_total", reason="invalid") == failures + 1
    [record] = caplog.records
    problems = record.__dict__["problems"]
    assert any(p.startswith(f"{policy_file}:") and "weight" in p for p in problems), problems
    assert store.last_error is not None
    # Put back as it was: nothing new to put in force, and no error any more.
    policy_file.write_text(SAMPLE_POLICY.read_text())
    assert store.reload_if_changed() is False
    assert (store.generation, store.last_error) == (1, None)
    # Fixed differently: in force.
    policy_file.write_text(renamed(SAMPLE_POLICY.read_text(), "fixed"))
    assert store.reload_if_changed() is True
    assert store.policy.name == "fixed"
    assert store.last_error is None


def test_not_utf8_and_deleted_files_are_refused(policy_file: Path, store: PolicyStore) -> None:
    unreadable = metric("quotaguard_policy_reload_failures_total", reason="unreadable")
    invalid = metric("quotaguard_policy_reload_failures_total", reason="invalid")
    policy_file.write_bytes(b"\xff\xfe not utf-8")
    assert store.reload_if_changed() is False
    policy_file.unlink()
    assert store.reload_if_changed() is False
    assert store.reload_if_changed() is False
    assert store.policy.name == "gpu-platform"
    assert metric("quotaguard_policy_reload_failures_total", reason="invalid") == invalid + 1
    assert metric("quotaguard_policy_reload_failures_total", reason="unreadable") == unreadable + 1


def configmap_volume(directory: Path, text: str, version: int) -> None:
    """What kubelet does: a new timestamped directory, then an atomic swap of `..data`."""
    data = directory / f"..2026_12_02_{version}"
    data.mkdir()
    (data / "policy.yaml").write_text(text)
    link = directory / "..data_tmp"
    link.symlink_to(data.name)
    link.replace(directory / "..data")
    if not (directory / "policy.yaml").is_symlink():
        (directory / "policy.yaml").symlink_to("..data/policy.yaml")


def test_configmap_symlink_swap_is_followed(tmp_path: Path) -> None:
    configmap_volume(tmp_path, SAMPLE_POLICY.read_text(), 1)
    store = PolicyStore(tmp_path / "policy.yaml")
    store.load()
    first = store.stamp
    configmap_volume(tmp_path, renamed(SAMPLE_POLICY.read_text(), "swapped"), 2)
    assert store.reload_if_changed() is True
    assert store.policy.name == "swapped"
    assert store.stamp is not None and first is not None
    assert store.stamp.resolved != first.resolved
    assert store.stamp.resolved.endswith("..2026_12_02_2/policy.yaml")


def test_watch_task_applies_changes_and_notifies_listeners(
    policy_file: Path, store: PolicyStore
) -> None:
    seen: list[tuple[str, int]] = []
    store.add_listener(lambda policy, generation: seen.append((policy.name, generation)))

    async def scenario() -> None:
        watcher = asyncio.create_task(store.watch(interval=0.01))
        policy_file.write_text(renamed(policy_file.read_text(), "watched"))
        for _ in range(500):
            if store.generation == 2:
                break
            await asyncio.sleep(0.01)
        watcher.cancel()

    asyncio.run(scenario())
    assert seen == [("watched", 2)]


def test_logs_are_json_lines(policy_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from quotaguard.serve.json_logging import configure_logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        configure_logging("info")
        PolicyStore(policy_file).load()
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
    [line] = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert line["level"] == "info"
    assert line["logger"] == "quotaguard.policy"
    assert line["generation"] == 1
    assert line["file"] == str(policy_file)
    assert line["time"].endswith("Z")


HOSTILE = Path(__file__).resolve().parents[1] / "fixtures" / "hostile"


@pytest.mark.parametrize(
    "fixture", ["policy-alias-bomb.yaml", "policy-deep.yaml", "policy-huge-max.yaml"]
)
def test_hostile_policy_is_refused_counted_once_without_traceback(
    fixture: str, policy_file: Path, store: PolicyStore, caplog: pytest.LogCaptureFixture
) -> None:
    failures = metric("quotaguard_policy_reload_failures_total", reason="invalid")
    good = store.policy
    policy_file.write_text((HOSTILE / fixture).read_text())
    with caplog.at_level(logging.INFO, logger="quotaguard.policy"):
        assert store.reload_if_changed() is False
        assert store.reload_if_changed() is False
    assert store.policy is good
    assert metric("quotaguard_policy_reload_failures_total", reason="invalid") == failures + 1
    [record] = caplog.records
    assert record.exc_info is None
    [problem] = record.__dict__["problems"]
    assert problem.startswith(f"{policy_file}:")


def test_a_policy_file_past_the_size_limit_is_refused(
    policy_file: Path, store: PolicyStore
) -> None:
    policy_file.write_text(SAMPLE_POLICY.read_text() + "#" * (5 * 1024 * 1024) + "\n")
    assert store.reload_if_changed() is False
    assert store.last_error is not None
    assert store.policy.name == "gpu-platform"
