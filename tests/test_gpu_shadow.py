"""The host shadow: the executable's own CPU code path computes each owner's contribution (G, n)
exactly as the oracle does, bit for bit (the GPU's result is compared against this in the GPU
owner). Built from the generated learner functions over the runtime, on both ISAs."""
import pytest

import oracle
from backend import run_exe
from conftest import example, require_tool

MAIN = """
fn main(argc: i64, argv: i64) -> i64 {
%s
    rt_flush();
    return 0;
}
"""


def shadow_exe(name, target, tmp_path):
    from alphac.build import link_program, program_for, target as get_target
    from alphac.driver import compile_file
    lr = compile_file(example(name)).learner
    calls = ["    learner_step();"] * 3           # from a state that is not the initial one
    for lo, hi in oracle.REF_SPLIT if lr.nsamples == 8 else [(0, lr.nsamples)]:
        calls.append(f"    learner_grad({lo}, {hi});")
        for p in lr.params:
            calls.append(f'    rt_print_state("{p.name}", G_{p.name}, {p.size}, 0);')
    tgt = get_target(target)
    prog, _ = program_for(lr, tgt, main="core", extra=MAIN % "\n".join(calls))
    elf, _, _ = link_program(prog, tgt)
    path = tmp_path / f"shadow-{name}.{target}"
    path.write_bytes(elf)
    path.chmod(0o755)
    return path, lr


@pytest.mark.parametrize("target", ["x86_64", "aarch64"])
@pytest.mark.parametrize("name", ["scalar_regression", "two_coordinate", "lsq_momentum", "lsq_adam"])
def test_owner_contribution_equals_the_oracle(name, target, tmp_path):
    if target == "aarch64":
        require_tool("qemu-aarch64")
    exe, lr = shadow_exe(name, target, tmp_path)
    grad, n = oracle.LEARNERS[name][2], oracle.LEARNERS[name][1]
    want = []
    state = oracle.initial(name)
    for _ in range(3):
        oracle.one_step(name, state, None, None)
    for lo, hi in oracle.REF_SPLIT if n == 8 else [(0, n)]:
        G, _ = oracle.owner_sum(state, grad, lo, hi)
        want += [f"{lr.params[0].name}[{j}] {oracle.hexbits(v)}" for j, v in enumerate(G)]
    r = run_exe(exe, target=target)
    assert r.returncode == 0 and r.stdout.splitlines() == want
