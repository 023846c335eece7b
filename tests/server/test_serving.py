"""What the server says of the kernel's handling of connections queued on a stopping worker."""

from __future__ import annotations

from pathlib import Path

from webhook.server.serving import respawn_resets_connections


def test_connections_are_reset_when_the_kernel_does_not_migrate_them(tmp_path: Path) -> None:
    sysctl = tmp_path / "tcp_migrate_req"
    sysctl.write_text("0\n")
    assert respawn_resets_connections(sysctl) == "0"


def test_connections_move_to_another_worker_when_the_kernel_migrates_them(tmp_path: Path) -> None:
    sysctl = tmp_path / "tcp_migrate_req"
    sysctl.write_text("1\n")
    assert respawn_resets_connections(sysctl) is None


def test_a_kernel_without_the_setting_is_not_warned_about(tmp_path: Path) -> None:
    assert respawn_resets_connections(tmp_path / "absent") is None
