"""GPU slots: the GPUs nvidia-smi reports plus declared (simulated) ones, matching a
request against them, and handing a slot to one run at a time across every Job under
the same root (an exclusive `flock` on one lock file per slot, held by the run's
supervisor and released by the kernel if it dies)."""

from __future__ import annotations

import fcntl
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from nodus_gitops.providers.local.config import GpuSlot
from nodus_gitops.providers.local.spec import GpuRequest

_VENDOR_WORDS = {"nvidia", "tesla", "geforce", "quadro"}


@dataclass(frozen=True)
class Slot:
    id: str
    index: int
    type: str
    memory: int  # bytes
    simulated: bool
    name: str = ""

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "index": self.index,
            "type": self.type,
            "memory": self.memory,
            "simulated": self.simulated,
            "name": self.name or self.type,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Slot:
        return cls(
            d["id"],
            int(d["index"]),
            d["type"],
            int(d["memory"]),
            bool(d["simulated"]),
            d.get("name", ""),
        )


def gpu_type_from_name(name: str) -> str:
    """`NVIDIA H100 80GB HBM3` -> `H100`, `Tesla T4` -> `T4`,
    `NVIDIA GeForce RTX 4090` -> `RTX4090`."""
    words = [w for w in name.split() if w.lower() not in _VENDOR_WORDS]
    if not words:
        return name.strip()
    if words[0].upper() in ("RTX", "GTX") and len(words) > 1:
        return words[0].upper() + words[1]
    return words[0]


def detect(exe: str | None, timeout: float = 5.0) -> list[Slot]:
    """The machine's GPUs from nvidia-smi (its absolute path, resolved once by the
    backend's settings); empty when it is missing or fails."""
    if not exe:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,name,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    slots = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        mem_text = parts[2].split()[0] if parts[2] else "0"
        memory = int(float(mem_text)) << 20 if mem_text.replace(".", "").isdigit() else 0
        slots.append(
            Slot(
                f"gpu{parts[0]}",
                int(parts[0]),
                gpu_type_from_name(parts[1]),
                memory,
                False,
                parts[1],
            )
        )
    return slots


def all_slots(declared: list[GpuSlot], detected: list[Slot]) -> list[Slot]:
    """Detected GPUs first, then the declared ones, numbered after them by default."""
    slots = list(detected)
    next_index = max((s.index for s in detected), default=-1) + 1
    for i, d in enumerate(declared):
        index = d.index if d.index is not None else next_index
        next_index = max(next_index, index + 1)
        sid = f"sim{i}" if d.simulated else f"gpu{index}"
        slots.append(Slot(sid, index, d.type, d.memory_bytes, d.simulated, d.type))
    return slots


def matches(slot: Slot, req: GpuRequest) -> bool:
    """Type matches by name (case-insensitive; locally a type is never substituted, so
    `H100!` and `H100` match the same slots) and memory is at least minMemory."""
    if req.type and slot.type.lower() != req.type.lower():
        return False
    return not (req.min_memory and slot.memory < req.min_memory)


def can_ever_fit(slots: list[Slot], req: GpuRequest) -> bool:
    return sum(1 for s in slots if matches(s, req)) >= req.count


def _shown(slot: Slot) -> str:
    return f"{slot.type} {slot.memory / (1 << 30):.4g}Gi"


def unplaceable(slots: list[Slot], req: GpuRequest) -> tuple[str, str] | None:
    """(message, fix) when no choice of this machine's slots can ever hold `req`: a
    Job's slots are fixed when it is created, so it would wait for nothing."""
    if can_ever_fit(slots, req):
        return None
    here = ", ".join(_shown(s) for s in slots) or "none"
    message = f"no GPU slot here can hold {req.describe()}; the slots here: {here}"
    if req.floor_from and req.min_memory:
        floor = f"{req.min_memory / (1 << 30):g}Gi"
        return message, (f"{req.floor_from} needs GPUs of at least {floor}: set "
                         "resources.gpu.minMemory or resources.gpu.type to a GPU this machine "
                         "has, or declare a slot with that memory in the local backend's "
                         "gpuSlots")
    return message, ("request a GPU this machine has in resources.gpu, or declare one in "
                     "the local backend's gpuSlots")


class SlotLease:
    """Slots held by one run; `release()` closes the lock files."""

    def __init__(self, slots: list[Slot], fds: list[int]):
        self.slots = slots
        self._fds = fds

    def release(self) -> None:
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = []

    @property
    def visible_devices(self) -> str:
        return ",".join(str(s.index) for s in self.slots)


def try_acquire(locks_dir: Path, slots: list[Slot], req: GpuRequest) -> SlotLease | None:
    """Lock `req.count` matching free slots, or none at all."""
    locks_dir.mkdir(parents=True, exist_ok=True)
    held: list[Slot] = []
    fds: list[int] = []
    for slot in slots:
        if len(held) == req.count:
            break
        if not matches(slot, req):
            continue
        fd = os.open(locks_dir / f"{slot.id}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        held.append(slot)
        fds.append(fd)
    if len(held) < req.count:
        SlotLease(held, fds).release()
        return None
    return SlotLease(held, fds)
