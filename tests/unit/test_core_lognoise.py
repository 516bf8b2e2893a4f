"""core.lognoise: the frameworks' chatter is hidden, the program's lines and every error are not.

The noise lines are copied from real logs: the fit_a_line demo's workers (PaddlePaddle 2.6.2 in
parameter-server mode, 2026-11-25) and torch 2.13's torchrun.
"""

from __future__ import annotations

import pytest

from paddlecloud.core.lognoise import LogFilter, is_noise

PADDLE_NOISE = [
    "[2026-11-25 19:08:04,136] [    INFO] distributed_strategy.py:214 - distributed strategy initialized",
    "fl-ps > coordinator address is null!",
    "valid_optimizer_list= [<paddle.distributed.fleet.meta_optimizers.ps_optimizer.ParameterServerOptimizer "
    "object at 0x7f6119226ad0>]",
    "meta_optimizer= <paddle.distributed.fleet.meta_optimizers.ps_optimizer.ParameterServerOptimizer object>",
    "graph_optimizer= None",
    "is_heter_ps_mode? False",
    "is_heter_ps_mode in distributed_ops_pass False?",
    "idx, name, ctx: 0 Dense@GRAD_0 varname: Dense@GRAD_0 trainer_id: 1  table_id: 0slice varname: "
    "Dense@GRAD_0 ep: 127.0.0.1:6071 section: 14",
    " table_id: 0",
    " program_id: 140055051526288",
    " is_tensor_table: 0",
    " is_datanorm_table: 0",
    "adam_d2sum: False",
    "remote_optimize_vars: ['learning_rate_0', 'w', 'b@GRAD', 'b', 'w@GRAD'], remote_optimize_op_role_vars: "
    "['w', 'b']",
    "paddle.static.default_startup_program: <function default_startup_program at 0x7f1c0128a020>",
    "communicator config: {'communicator_max_merge_var_num': '1', 'communicator_send_queue_size': '1'}",
    "create c2c connection done",
    "entering self._init_all_params()",
    "save inference model scope idx: 0",
    "Gloo init with HTTP: need_init_all: False, args: {'http.host': '127.0.0.1', 'http.port': '41605', "
    "'store.prefix': '', 'start_http_server': False}",
    "I1125 19:08:04.123456 12345 brpc_ps_server.cc:67] running server with rank id: 0",
    "W1125 19:08:04.223456 12345 gpu_resources.cc:119] Please NOTE: device: 0, GPU Compute Capability: 8.0",
]
TORCH_NOISE = [
    "[W socket.cpp:663] [c10d] The client socket has failed to connect to [localhost]:29500.",
    "[W1125 19:08:04.123456789 socket.cpp:755] [c10d] The client socket has failed to connect to "
    "[localhost]:29500 (errno: 99 - Cannot assign requested address).",
    "W1125 19:08:04.123000 1234 torch/distributed/run.py:793] ",
    "*****************************************",
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your "
    "system being overloaded, please further tune the variable for optimal performance.",
    "WARNING:torch.distributed.elastic.multiprocessing.redirects:NOTE: Redirects are currently not supported",
    "INFO:torch.distributed.launcher.api:Starting elastic_operator with launch configs:",
    "/data/envs/abc/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:4631: UserWarning: "
    "No device id is provided via `init_process_group` or `barrier `.",
]
PROGRAM = [
    "pass 0: 4 shards (00001, 00003, 00005, 00007), loss 0.009833 (1.5s)",
    "trainer 0/2: initial loss 17.892124",
    "final loss 0.009951",
    "gloo HTTP store on port 40271",
    "pserver 1 serving on 127.0.0.1:45791",
    "[INFO] my own logger line",
    "INFO:root:my own logging.basicConfig line",
    "WARNING:__main__:my own warning",
    "E1125 19:08:04.123456 12345 table.cc:12] an error of the C++ core",
    "F1125 19:08:04.123456 12345 table.cc:12] Check failed: a fatal one",
    "/work/job/train.py:12: UserWarning: the program's own warning",
    "Traceback (most recent call last):",
    '  File "/work/job/train.py", line 3, in <module>',
    "ValueError: bad shard",
    "[rank0]: RuntimeError: Connection closed by peer [127.0.0.1]:29083.",
    "step 3",
    "",
    "   indented output of the program",
]

# the C++ report PaddlePaddle pservers print when the platform stops them with SIGTERM (verbatim)
SIGTERM_BLOCK = """

--------------------------------------
C++ Traceback (most recent call last):
--------------------------------------
0   paddle::distributed::FleetWrapper::RunServer(std::string const&, unsigned int)
1   paddle::distributed::BrpcPsServer::Start(std::string const&, unsigned int)

----------------------
Error Message Summary:
----------------------
FatalError: `Termination signal` is detected by the operating system.
  [TimeInfo: *** Aborted at 1795633706 (unix time) try "date -d @1795633706" if you are using GNU date ***]
  [SignalInfo: *** SIGTERM (@0xfffe00000000) received by PID 4 (TID 0x7fba074b2b80) from PID 0 ***]

""".splitlines()


def run(lines: list[str]) -> tuple[list[str], int]:
    f = LogFilter()
    shown = [out for line in lines for out in f.feed(line + "\n")]
    shown += f.flush()
    return [s.removesuffix("\n") for s in shown], f.hidden


@pytest.mark.parametrize("line", PADDLE_NOISE + TORCH_NOISE)
def test_framework_chatter_is_noise(line: str) -> None:
    assert is_noise(line)


@pytest.mark.parametrize("line", PROGRAM)
def test_the_programs_lines_and_every_error_are_not(line: str) -> None:
    assert not is_noise(line)


def test_the_program_survives_the_filter_in_order_and_the_hidden_lines_are_counted() -> None:
    lines = [*PADDLE_NOISE[:3], PROGRAM[0], *TORCH_NOISE, PROGRAM[1], PADDLE_NOISE[-1], PROGRAM[2]]
    shown, hidden = run(lines)
    assert shown == [PROGRAM[0], PROGRAM[1], PROGRAM[2]]
    assert hidden == len(lines) - 3


def test_worker_prefixes_are_kept_and_each_worker_is_judged_alone() -> None:
    lines = [
        "[pserver-0] fl-ps > coordinator address is null!",
        "[trainer-1] pass 0: 4 shards, loss 0.01",
        "[trainer-0] [2026-11-25 19:08:14,045] [    INFO] distributed_strategy.py:214 - initialized",
        "[trainer-0] final loss 0.009951",
    ]
    shown, hidden = run(lines)
    assert shown == ["[trainer-1] pass 0: 4 shards, loss 0.01", "[trainer-0] final loss 0.009951"]
    assert hidden == 2


def test_a_blank_line_after_chatter_goes_with_it_but_the_programs_blank_lines_stay() -> None:
    shown, hidden = run([" is_datanorm_table: 0", "", "hello", "", "world"])
    assert shown == ["hello", "", "world"] and hidden == 2


def test_a_library_warnings_source_line_goes_with_it_but_the_programs_warning_stays() -> None:
    lines = [
        "/env/lib/python3.11/site-packages/paddle/base/framework.py:688: UserWarning: gloo not initialized",
        "  warnings.warn(",
        "/work/job/train.py:12: UserWarning: mine",
        "  warnings.warn('mine')",
    ]
    shown, hidden = run(lines)
    assert shown == lines[2:] and hidden == 2


def test_paddles_report_of_the_platforms_sigterm_is_hidden_whole() -> None:
    lines = ["pserver 0 serving on 127.0.0.1:48111", *SIGTERM_BLOCK, *SIGTERM_BLOCK]
    shown, hidden = run(lines)
    assert shown == ["pserver 0 serving on 127.0.0.1:48111", "", ""]  # the program's blank lines before it
    assert hidden == len(lines) - 3


def test_paddles_report_of_a_crash_is_shown_whole() -> None:
    crash = [line.replace("SIGTERM", "SIGSEGV") for line in SIGTERM_BLOCK]
    shown, hidden = run(crash)
    assert shown == crash and hidden == 0
    error = [*SIGTERM_BLOCK[2:9], "InvalidArgumentError: The shape of input(X) is wrong.", "after"]
    shown, hidden = run(error)
    assert shown == error and hidden == 0


def test_a_block_cut_short_is_shown_when_the_log_ends() -> None:
    shown, hidden = run(SIGTERM_BLOCK[:6])
    assert shown == SIGTERM_BLOCK[:6] and hidden == 0


def test_a_programs_separator_line_is_held_only_until_its_next_line() -> None:
    f = LogFilter()
    assert f.feed("-" * 40 + "\n") == []  # might begin Paddle's report
    assert f.feed("epoch 1\n") == ["-" * 40 + "\n", "epoch 1\n"]
    assert f.hidden == 0


def test_blocks_of_two_workers_do_not_mix() -> None:
    lines = [f"[pserver-{i % 2}] {line}" for line in SIGTERM_BLOCK[2:] for i in (0, 1)]
    lines.insert(5, "[trainer-0] final loss 0.01")
    shown, hidden = run(lines)
    assert shown == ["[trainer-0] final loss 0.01"]
    assert hidden == len(lines) - 1
