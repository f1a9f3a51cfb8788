"""`free_port` hands out ports the kernel never assigns by itself, so nothing else takes them meanwhile."""

from __future__ import annotations

import socket

import pytest

from compactsim.harness.gym_check import gym_stack


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((gym_stack.HOST, port))
        except OSError:
            return False
        return True


def test_ports_come_from_below_the_ephemeral_range_and_are_free():
    low = gym_stack._ephemeral_low()
    ports = [gym_stack.free_port() for _ in range(20)]
    assert all(gym_stack._LOWEST_PORT <= p < low for p in ports), ports
    assert all(_bindable(p) for p in ports)


def test_a_port_that_is_taken_is_never_handed_out(monkeypatch: pytest.MonkeyPatch):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind((gym_stack.HOST, 0))
        taken = held.getsockname()[1]
        monkeypatch.setattr(gym_stack, "_LOWEST_PORT", taken)
        monkeypatch.setattr(gym_stack, "_ephemeral_low", lambda: taken + 1)  # the range holds only the taken port
        port = gym_stack.free_port()  # 64 refused draws, then the kernel's own pick
    assert port != taken


def test_an_unreadable_range_falls_back_to_linuxs_default(monkeypatch: pytest.MonkeyPatch, tmp_path):
    monkeypatch.setattr(gym_stack, "_EPHEMERAL_RANGE_FILE", tmp_path / "absent")
    assert gym_stack._ephemeral_low() == 32_768
