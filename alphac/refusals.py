"""Run-time refusals: the one table of names and exit codes.

An executable (and the reference interpreter, and the launcher) that refuses prints exactly one
line `refused: NAME` on standard error and exits with the code below. Nothing is half-written: a
refusal happens before the state is published. The table is lowered into every executable
(`alphac.lower.rt_lower`) and documented in docs/refusals.md (generated from it; a test keeps the
two equal). Exit codes start at 64 so that they never collide with the `alphac` command's
own (TOOL_EXITS below: 0 success, 1 an input's errors, 2 usage, 3 a difference found, 4 a defect).
"""
from __future__ import annotations

# The `alphac` command's own exit codes, below the refusals' (docs/refusals.md and `alphac --help`
# render this table): name -> (exit code, when).
TOOL_EXITS: dict[str, tuple[int, str]] = {
    "ok": (0, "success (for `verify`: every hash matches; for `verify-record`: an authentic pass)"),
    "error": (1, "the input has errors (diagnostics on standard error; for `verify`, a missing or "
                 "malformed manifest), or a file cannot be read or written (`alphac: error: ...`)"),
    "usage": (2, "the command line is wrong (the command's usage message; an empty path is one)"),
    "differs": (3, "`verify` found a difference, or `verify-record` a record that is not an "
                   "authentic pass (one line per problem on standard error)"),
    "internal-error": (4, "alphac has a defect (`alphac: internal error: ...`, please report the "
                          "input): never the answer to an input, however hostile"),
}

# The most digits of a number on an executable's command line (`--steps N`, `--deadline-ms MS`,
# `--rank R`...): the runtime's rt_parse_dec (alphac/runtime/core.rt) refuses a longer one as
# `usage`, and `alphac`'s options that reach an executable refuse it the same way
# (tests/test_hostile_runs.py runs both sides at the bound).
DECIMAL_DIGITS = 15

# The refusals a role answers at start, before it talks to any peer (its command line, CPU, data,
# checkpoint or card): once one role has answered one, the run cannot pass and its peers would only
# wait out their deadline, so the launcher ends them at once (alphac/tools/supervise.py).
START_REFUSALS = frozenset({
    "usage", "cpu-level", "listen-failed", "name-unresolved", "rank-out-of-range",
    "checkpoint-missing", "manifest-torn", "shard-missing", "shard-corrupt", "shard-non-finite",
    "checkpoint-other-learner", "checkpoint-layout", "device-uuid", "nvidia-plan-host",
    "launch-image", "gpu-topology", "nvidia-open", "nvidia-call", "nvidia-map",
    "data-missing", "data-shape", "data-hash", "data-label"})

# The refusals whose line an executable writes with a detail, `refused: NAME (DETAIL)` (every other
# one it writes as `refused: NAME`): `alphac run` writes the interpreter's the same way.
DETAILED = frozenset({"usage", "nvidia-open", "data-label"})

# name -> (exit code, when)
REFUSALS: dict[str, tuple[int, str]] = {
    "usage": (64, "the command line is not what the executable takes (`--help` prints its usage "
                  "line: a learner takes `--steps N`, a role also its addresses), a number is not "
                  f"a decimal integer of at most {DECIMAL_DIGITS} digits, or an option is unknown; "
                  "the usage line, then `refused: usage (ARG: WHAT)` naming the argument"),
    "cpu-level": (67, "the executable was built for a target level (x86_64-v3: AVX2; x86_64-v4: "
                      "AVX-512 F, DQ, CD, BW and VL) that this CPU, "
                      "or its operating system, does not provide; build for `x86_64` instead (a GPU "
                      "owner built for x86_64-v4+sm_90: for `x86_64+sm_90`)"),
    "buffer-bound": (68, "text the runtime builds (a checkpoint path, an event line, a DNS query) "
                         "or a table it fills would not fit its buffer, whose size is fixed when "
                         "the executable is built; checked before a byte is written (every such "
                         "write goes through a bounded append: docs/runtime.md)"),
    "output": (66, "standard output could not be written (a closed pipe, a full disk)"),
    "listen-failed": (70, "a role could not listen on the address given by --listen"),
    "connect-failed": (71, "a role could not reach its parent within the deadline"),
    "peer-lost": (72, "a peer closed its connection, or did not send (or take) a whole frame, or "
                      "finish the connection's set-up, within the deadline: most often a peer "
                      "that refused or crashed first (the launcher names the first role that "
                      "refused), else a network that dropped the connection or a `--deadline-ms` "
                      "shorter than the peers take to start"),
    "frame-bad-header": (73, "a frame does not start with the magic and format of alphac frames"),
    "frame-too-long": (74, "a frame announces more payload than the receiver expects (the bound "
                           "is fixed at compile time)"),
    "frame-truncated": (75, "a frame ends before its header or payload is complete, or announces "
                            "less than the receiver expects"),
    "frame-checksum": (76, "a frame's checksum does not match its bytes"),
    "frame-unknown-role": (77, "a frame comes from a role that is not the expected peer (a "
                               "role that is not one of the receiver's children or peers)"),
    "frame-bad-accumulator": (79, "a combine frame's exact sums (`contract exact_sum`) are not in "
                              "its format: a record count past the sums or a spill count past the "
                              "records, a record's index out of range or order, a record's header "
                              "zero, with an undefined bit or a base out of range, or spill records "
                              "that do not match the spilled headers"),
    "frame-out-of-order": (78, "a frame has the wrong kind or is for another step"),
    "peer-learner": (80, "a peer was built for another learner"),
    "peer-rate": (81, "a peer was built with other constants (a learning rate, say)"),
    "peer-contract": (82, "a peer was built for another numerical contract"),
    "peer-combine-order": (83, "a peer combines in another order (another combine tree)"),
    "peer-membership": (84, "a peer was built for another membership or topology"),
    "peer-plan": (85, "a peer was built for another sample split, strategy or placement"),
    "peer-steps": (86, "a peer was started for another number of steps (`--steps`): every role of a "
                       "run must take the same steps"),
    "name-unresolved": (87, "a role's --listen or --parent host name is in neither the hosts file nor "
                            "any answer of the nameservers of resolv.conf within the deadline"),
    "rank-out-of-range": (88, "`--rank R` names a role this executable is not built for (its "
                              "compiled rank, or its index node's ranks)"),
    "rank-duplicate": (89, "a role connects twice to its parent (or to a mesh peer): two roles "
                           "with the same rank, or one role started twice"),
    "stale-epoch": (90, "a frame or checkpoint belongs to an older epoch"),
    "peer-unauthenticated": (91, "a peer's HELLO does not prove the run's key (ALPHAC_RUN_KEY): "
                                 "a process started without it or with another run's, or a "
                                 "HELLO replayed from another connection (docs/distribution.md, "
                                 "\"Membership\")"),
    "frame-unauthenticated": (92, "a frame's MAC under its connection's session key does not "
                                  "match: a frame changed, dropped, reordered or replayed on the "
                                  "way (a run with a key)"),
    "artifact-hash": (100, "the launcher found an executable (or roles.json) whose SHA-256 is not "
                           "the build manifest's, or no manifest; nothing was started"),
    "launch-tool": (101, "the launcher needs a tool this host lacks (qemu-aarch64 for AArch64 roles, "
                         "qemu-x86_64 for x86_64-v3 roles where the CPU lacks AVX2; a CPU "
                         "with AVX-512 for x86_64-v4 roles, which qemu does not emulate)"),
    "run-failed": (102, "a role of the launched deployment refused or crashed; nothing was published "
                        "(the run record names the role and its refusal)"),
    "launch-input": (103, "the launcher's inputs are malformed: roles.json or the build manifest is "
                          "not JSON or lacks a field the launcher reads, or a role file is not an "
                          "executable regular file; nothing was started"),
    "records-dir": (104, "the launcher cannot make the run's record directory under --records (a "
                         "path through a file, no permission), or reserve the space its record "
                         "and the roles' events need (a full disk); nothing was started"),
    "shrink-contract": (109, "`alphac launch --shrink` of a learner whose contract is not "
                             "exact_sum: its bits depend on the owner count, so a run cannot go on "
                             "with fewer owners and publish the uninterrupted run's; nothing was "
                             "started (restart it with the same membership: --restarts)"),
    "record-write": (108, "the run ended but its record could not be written under --records (a "
                          "disk that filled beyond the space reserved for it before the start); "
                          "the detail says whether it passed, where its checkpoint and its "
                          "events are"),
    "job-not-done": (134, "`alphac slurm-record`: the Slurm job is still queued or running (squeue "
                          "shows it); nothing was written: `--wait` waits for it to end"),
    "record-key": (105, "the record key file cannot be read or made, holds fewer than 32 bytes, or "
                        "others can read or write it; a launch starts nothing"),
    "launch-interrupted": (106, "the launcher got SIGINT, SIGTERM or SIGHUP: every role was ended, "
                                "nothing was published, and the run record says so"),
    "record-malformed": (107, "a run record to verify is not JSON, not of the current record "
                              "format, or lacks a field the verification reads"),
    "checkpoint-write": (110, "a checkpoint file could not be written, fsynced or renamed into place; "
                              "the previous checkpoint is untouched"),
    "checkpoint-missing": (111, "--resume names a directory without a checkpoint manifest"),
    "manifest-torn": (112, "a checkpoint manifest is truncated, torn, or fails its checksum, or "
                           "is not what the format allows (its kind, owner range or record count, "
                           "a record path outside the checkpoint)"),
    "shard-missing": (113, "a shard the manifest lists is missing, or the shards do not cover a "
                           "value to restore"),
    "shard-corrupt": (114, "a shard's bytes do not match the checksum its manifest records, or it "
                           "is not the .npy array the manifest describes"),
    "shard-non-finite": (115, "a shard holds a NaN or an infinity (even behind a checksum that "
                              "matches it): a checkpoint publishes finite state only"),
    "checkpoint-other-learner": (116, "the checkpoint was written by another learner (or the same "
                                      "learner with other constants)"),
    "checkpoint-layout": (117, "a hierarchy resumes only from a checkpoint of its own shape, and a "
                               "star or a single process only from a flat one"),
    "device-uuid": (120, "a GPU owner's card has another UUID than the card it was built for; "
                         "refused at start-up, before anything is allocated on the card"),
    "nvidia-plan-host": (121, "a GPU owner runs on another host than the one it was built for: the "
                              "driver version, the product name, the card's device minor, its "
                              "classes or its memory differ; refused before anything is allocated"),
    "launch-image": (122, "a GPU owner's launch image (kernels, QMDs, constant banks, push "
                          "buffers, initial state) does not match its SHA-256: the executable "
                          "was altered; refused before the driver is opened"),
    "gpu-shadow-mismatch": (123, "the GPU's result bits differ from the host shadow's (the same "
                                 "step computed on the CPU); nothing is published"),
    "nvidia-open": (124, "a GPU owner cannot open an NVIDIA device file: the detail names the file "
                         "and the errno (2: the file does not exist: no NVIDIA driver loaded, or "
                         "no card with the minor it was built for, /dev/nvidiaN; 13: no "
                         "permission: join the group that owns /dev/nvidia*). Run it on the host "
                         "it was built for (the deployment's `gpu` item, `--gpu-host`); "
                         "`nvidia-smi` lists the cards there"),
    "nvidia-call": (125, "the NVIDIA driver refused a call of the conversation (an ioctl failed or "
                         "answered a non-zero status; the events file names the call), or, under --gpu-map rm, "
                         "mapped memory elsewhere than the plan's address (the event map NAME)"),
    "nvidia-map": (126, "a GPU owner could not map driver memory at the address its plan fixes"),
    "gpu-timeout": (127, "a launch did not complete (its semaphore was not released) within 4 s of "
                         "CLOCK_MONOTONIC; the events file holds GPGet and GPPut (from USERD), the "
                         "channel's error notifier word by word and the semaphore"),
    "gpu-topology": (128, "a spilling GPU owner's card has more GPCs, TPCs/GPC, SMs/TPC or warps/SM than "
                          "the `topology` its local memory was sized for; refused before allocating"),
    "data-missing": (130, "a data file cannot be opened or read (the path the build read it from, "
                          "or `--data DIR` and the path `load` names); refused before the first step"),
    "data-shape": (131, "a data file's size or header (dtype, order, shape) differs from the file "
                        "the executable was built against; refused before the first step"),
    "data-hash": (132, "a chunk of a data file that covers the owner's rows does not match the "
                       "digest the build recorded (a changed byte); refused before the first step"),
    "data-label": (133, "a label that `onehot(NAME[i], K)` reads, or an index that `E[NAME[i]]` reads "
                        "from a K-row E (a row of NAME, the detail names it and E), is not a whole "
                        "number from 0 to K-1, as every engine checks the rows it "
                        "reads; refused before the first step (the checker warns, W0004, when the "
                        "labels are written in the source)"),
    "non-finite-state": (65, "a value to be published is NaN or infinite; the contract publishes "
                             "finite state only, so nothing is printed"),
}


class Refusal(Exception):
    """A named refusal raised inside the compiler's own runs (interpreter, launcher)."""

    def __init__(self, name: str, detail: str = ""):
        assert name in REFUSALS, name
        super().__init__(f"refused: {name}" + (f" ({detail})" if detail else ""))
        self.name = name
        self.detail = detail

    @property
    def exit_code(self) -> int:
        return REFUSALS[self.name][0]


def exit_code(name: str) -> int:
    return REFUSALS[name][0]


def tool_exit(name: str) -> int:
    """The `alphac` command's exit code `name` (TOOL_EXITS)."""
    return TOOL_EXITS[name][0]


def exit_table() -> list[tuple[str, str]]:
    """Every exit code of `alphac` and what it means, in order: the tool's own, then the
    refusals' (64 and up, each `refused: NAME`)."""
    rows = [(str(code), when) for code, when in sorted(TOOL_EXITS.values())]
    return rows + [(f"{min(c for c, _ in REFUSALS.values())}-{max(c for c, _ in REFUSALS.values())}",
                    "a run refused: `refused: NAME` on standard error, the code of NAME in "
                    "docs/refusals.md")]


def explain_run(key: str) -> str | None:
    """`alphac explain KEY` for what a run answers: a refusal's name (`nvidia-open`) or an exit
    code (`124`, `2`), with what it means, from REFUSALS and TOOL_EXITS; None for anything else.
    A name both tables hold (`usage`) is shown from both."""
    out = [f"refused: {name} (exit code {code})\n\n{when}\n" for name, (code, when) in REFUSALS.items()
           if key in (name, str(code))]
    out += [f"alphac exit code {code} ({name})\n\n{when}\n" for name, (code, when) in TOOL_EXITS.items()
            if key in (name, str(code))]
    return "\n".join(out) or None
