"""Writes the seed corpora of the libFuzzer targets (fuzz/corpus/<target>/<name>).

Each seed is a small valid scenario in the input format documented at the top of the target's
source, so that fuzzing starts from inputs that reach deep into the firmware:

    .venv/bin/python fuzz/make_corpus.py        # rewrites these seeds in fuzz/corpus/; commit them
"""

from __future__ import annotations

import struct
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"

# spyre/hw/commands.h, regs.h, isa.h
NOP, COPY, LAUNCH, TIMESTAMP, SIGNAL, WAIT = range(6)
SRC_HOST, DST_HOST = 1, 2
PROGRAM_MAGIC, ISA_VERSION = 0x50595053, 2
HOST_BASE, QUEUE_SPAN = 0x10000, 0x8000
MEM, CORES = 1 << 30, 32


def descriptor(opcode: int, args: tuple[int, ...] = (), flags: int = 0, seq: int = 0) -> bytes:
    words = list(args) + [0] * (6 - len(args))
    return struct.pack("<BBHIQ6Q", opcode, flags, 0, 0, seq, *words)


def copy(src: int, dst: int, size: int, flags: int = 0, seq: int = 0) -> bytes:
    return descriptor(COPY, (src, dst, size), flags, seq)


def launch(program: int, size: int, mask: int, args: int = 0, args_size: int = 0, label: int = 0) -> bytes:
    return descriptor(LAUNCH, (program, size, args, args_size, mask, label))


def header(entries: int, instrs: int, instr_offset: int, name_offset: int = 0, name_size: int = 0) -> bytes:
    return struct.pack(
        "<IHHIIII2I", PROGRAM_MAGIC, ISA_VERSION, entries, instrs, instr_offset, name_offset, name_size, 0, 0
    )


# A one-core program: header, one entry, padding to 64, four instructions, a 6-byte name.
ONE_CORE = header(1, 4, 64, 64 + 4 * 32, 6)
ONE_CORE_SIZE = 256  # a multiple of 32 that holds the name


def parsers(d: bytes = descriptor(NOP), mem: int = MEM, cores: int = CORES, program: bytes = ONE_CORE) -> bytes:
    return d + struct.pack("<QB", mem, cores) + program


def queue(log2_entries: int = 3, head: int = 0, first_seq: int = 1, raw_entries: int | None = None) -> bytes:
    mode = 0x80 if raw_entries is not None else log2_entries
    return struct.pack("<BIIIBBQ", mode, raw_entries or 0, head, 0, 1, 0, first_seq)


def two_queues(**q0: int) -> bytes:
    return queue(**q0) + queue(2)


# Actions (fuzz_descriptor.cpp): op = action | flags | queue << 7.
def service(q: int = 0) -> bytes:
    return bytes([q << 7])


def push(d: bytes, q: int = 0, next_seq: bool = True, ring: bool = True) -> bytes:
    return bytes([1 | (0x10 if next_seq else 0) | (0x20 if ring else 0) | q << 7]) + d


def doorbell(n: int, q: int = 0) -> bytes:
    return bytes([2 | q << 7, n])


def control(value: int, q: int = 0) -> bytes:
    return bytes([3 | q << 7, value])


def set_register(which: int, value: int, q: int = 0) -> bytes:
    return bytes([4 | q << 7, which]) + struct.pack("<I", value)


def drain(q: int = 0) -> bytes:
    return bytes([5 | q << 7])


FENCE_HI = 6  # index of FENCE_HI in the target's table of host registers
PROGRAM = 0x4000  # device address of the program in the launch seeds
HOST_SCRATCH = HOST_BASE + 0x7100  # mapped host memory that no ring uses

DESCRIPTOR_SEEDS = {
    "nop": parsers() + two_queues() + push(descriptor(NOP)) + service(),
    "copies": parsers(copy(0x1000, 0, 4096, SRC_HOST))
    + two_queues()
    + push(copy(HOST_SCRATCH, 0x1000, 64, SRC_HOST))
    + push(copy(0x1000, HOST_SCRATCH, 64, DST_HOST))
    + push(copy(0x1000, 0x2000, 4096))
    + drain()
    + bytes([0, 0, 0]),  # each copy succeeds
    "launch": parsers(launch(PROGRAM, ONE_CORE_SIZE, 1 << 5, args=0x8000, args_size=16))
    + two_queues()
    + push(launch(PROGRAM, ONE_CORE_SIZE, 1 << 5, args=0x8000, args_size=16))
    + service()
    + bytes([0]),
    "launch_faults": parsers(launch(PROGRAM, ONE_CORE_SIZE, 1))
    + two_queues()
    + push(launch(PROGRAM, ONE_CORE_SIZE, 1))
    + push(descriptor(NOP))
    + drain()
    + bytes([0xE5]),  # the core faults; the nop then completes "queue in error"
    "timestamp": parsers(descriptor(TIMESTAMP, (HOST_SCRATCH,)))
    + two_queues()
    + push(descriptor(TIMESTAMP, (HOST_SCRATCH,)))
    + service(),
    "semaphores": parsers(descriptor(WAIT, (0x100, 1)))
    + two_queues()
    + push(descriptor(WAIT, (0x100, 1)))
    + push(descriptor(SIGNAL, (0x100, 2)), q=1)
    + service()
    + bytes([2, 0])  # one wakeup for nothing, then the signal
    + service(1),
    "reset_in_wait": parsers()
    + two_queues()
    + push(descriptor(WAIT, (0x100, 7)))
    + service()
    + bytes([1])  # the host resets the queue
    + push(descriptor(NOP))
    + service(),
    "reset_in_copy": parsers()
    + two_queues()
    + push(copy(0, 64, 8))
    + service()
    + bytes([0xD5])  # the host resets the queue while the copy runs
    + push(descriptor(NOP))
    + service(),
    "overrun_then_reset": parsers()
    + two_queues(log2_entries=2)
    + push(descriptor(NOP))
    + doorbell(8)
    + service()
    + control(3)
    + push(descriptor(NOP))
    + service(),
    # A halted queue stays stopped until a reset: the doorbell after the halt must run nothing.
    "doorbell_after_halt": parsers()
    + two_queues(log2_entries=2)
    + doorbell(8)
    + service()
    + push(descriptor(NOP))
    + service(),
    "bad_sequence": parsers()
    + two_queues(first_seq=5)
    + push(descriptor(NOP))
    + push(descriptor(NOP, seq=3), next_seq=False)
    + drain(),
    "error_state": parsers(descriptor(200))
    + two_queues()
    + push(descriptor(200))
    + push(descriptor(SIGNAL, (0x100, 2)))
    + push(copy(0, 64, 8))
    + drain(),
    "bad_ring_size": parsers() + two_queues(raw_entries=3) + push(descriptor(NOP)) + service(),
    "fence_unmapped": parsers() + two_queues() + set_register(FENCE_HI, 1) + push(descriptor(NOP)) + service(),
    "head_wraps": parsers()
    + two_queues(log2_entries=2, head=0xFFFF_FFFE)
    + b"".join(push(descriptor(NOP)) for _ in range(4))
    + drain(),
}


def program_input(h: bytes, program: int, size: int, mask: int, mem: int = MEM, cores: int = CORES) -> bytes:
    return h + struct.pack("<6Q", program, size, 0, 0, mask, 0) + struct.pack("<QB", mem, cores)


PROGRAM_SEEDS = {
    "one_core_named": program_input(ONE_CORE, PROGRAM, ONE_CORE_SIZE, 1),
    # 32 entries (128 bytes) after the header, code at 160, no name.
    "spmd_32_cores": program_input(header(32, 10, 160), PROGRAM, 160 + 320, (1 << 32) - 1),
    "name_at_the_end": program_input(header(1, 1, 64, 96, 255), PROGRAM, 352, 1 << 7),
    "entries_mismatch": program_input(header(2, 1, 64), PROGRAM, 96, 1),
    "outside_memory": program_input(ONE_CORE, MEM - 128, ONE_CORE_SIZE, 1),
    "all_64_cores": program_input(header(64, 1, 288), 0, 320, (1 << 64) - 1, cores=64),
}


# fuzz_messages.cpp: a byte of file-descriptor count, then one packet of simd/include/spyre/simd/protocol.h
# (header: command, flags, body size, id, error; body: four u64 arguments and a text).
def message(fds: int, command: int, flags: int = 0, args=(0, 0, 0, 0), text: bytes = b"", error: int = 0) -> bytes:
    body = struct.pack("<4Q", *args) + text
    return bytes([fds]) + struct.pack("<HHIII", command, flags, len(body), 7, error) + body


REPLY, NO_REPLY, ERROR = 1, 2, 4
MESSAGE_SEEDS = {
    "hello": message(0, 1, args=(3, 1234, 0x8DEF3ECFFC3564C8, 0), text=b'/tmp/card.json\0{"chip": {"cores": 8}}\0'),
    "status_reply": message(0, 13, REPLY, text=b'{"clients": [], "cards": []}'),
    "dma_map_peer": message(0, 14, args=(0, 1, 0xE00000000, 1 << 20)),
    "mmio_read": message(0, 4, args=(0, 0x1028, 0, 0)),
    "mmio_write_posted": message(0, 5, NO_REPLY, args=(0, 0x1030, 5, 0)),
    "dma_map": message(1, 6, args=(0, 1 << 20, 4096, 0)),
    "irq_set": message(1, 8, args=(1, 0, 0, 0)),
    "wait_begin": message(0, 9, args=(0, 3, 17, 0)),
    "error_reply": message(0, 6, REPLY | ERROR, text=b"spyre-simd: cannot map the client's memory", error=2),
    "reports_reply": message(0, 12, REPLY, text=b"/tmp/t.json\n/tmp/s.json"),
}


def write(target: str, seeds: dict[str, bytes]) -> None:
    # Other files in the folder (inputs of past crashes, kept as regressions) stay as they are.
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in seeds.items():
        (folder / name).write_bytes(data)


def main() -> None:
    write("fuzz_descriptor", DESCRIPTOR_SEEDS)
    write("fuzz_program", PROGRAM_SEEDS)
    write("fuzz_messages", MESSAGE_SEEDS)
    every = (DESCRIPTOR_SEEDS, PROGRAM_SEEDS, MESSAGE_SEEDS)
    total = sum(len(v) for seeds in every for v in seeds.values())
    print(f"make_corpus: {sum(len(seeds) for seeds in every)} seeds, {total} bytes, in {CORPUS}")


if __name__ == "__main__":
    main()
