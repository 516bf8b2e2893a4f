"""PaddlePaddle parameter-server example job for PaddleCloud: fit a line.

Linear regression on a synthetic "UCI housing"-like data set (13 features,
``data.py``), trained with fleet in asynchronous parameter-server mode
(static graph, ``a_sync=True``). The same program runs as every worker; the
role comes from TRAINING_ROLE (PSERVER | TRAINER) and the other PADDLE_*
variables the platform sets.

Trainers read their data through the job's task master: the job's input
(``--input``) is the data set in shard files and ``--tasks-from-input
--passes N`` makes every shard a task of every pass. Each trainer leases a
shard, feeds it through a QueueDataset with ``exe.train_from_dataset`` (plain
``exe.run`` does not pull parameters back from the pservers in this mode) and
acknowledges it; the task master hands a shard whose trainer died to another
trainer (at once when the platform sees the trainer's run end, at the latest
when the lease expires), so no data is lost; the trainers need no barrier among
themselves, so a restarted trainer simply joins again. Without an input the
trainer writes its own shards (rows ``i % PADDLE_TRAINERS_NUM ==
PADDLE_TRAINER_ID``) and trains on them for EPOCHS passes.

Trainers print ``pass N: K shards, loss X`` after every pass (MSE of the
current parameters on that pass's shards). Trainer 0 then prints ``final
loss X`` (on the whole data set) and the distance of the learned weights from
the true ones, and saves an inference model under
``$PADDLECLOUD_OUTPUT_DIR/model``. A trainer exits 1 if its final loss misses
TARGET_LOSS. Pservers serve until they are killed.
"""

import contextlib
import io
import multiprocessing
import os
import sys
import threading
import time
import warnings

import data
import numpy as np

SEED = data.SEED
NUM_FEATURES = data.NUM_FEATURES
EPOCHS = 5  # without a task master; with one, the job's --passes
BATCH_SIZE = 32
LEARNING_RATE = 0.005  # 0.05 diverges under async PS updates
TARGET_LOSS = 0.05  # noise floor is NOISE_STD ** 2 = 0.01


def log(msg):
    print(msg, flush=True)


def load_shard(path):
    """A MultiSlot shard file as numpy arrays (x, y)."""
    a = np.loadtxt(path, dtype="float32", ndmin=2)
    return a[:, 1 : 1 + NUM_FEATURES], a[:, -1]


def full_data():
    xs, ys = zip(*data.rows(), strict=True)
    return np.array(xs, dtype="float32"), np.array(ys, dtype="float32")


def with_task_master():
    """The job was submitted with its data set as input (``--tasks-from-input``)."""
    return bool(os.environ.get("PADDLECLOUD_INPUT_DIR"))


def independent_trainer():
    """With a task master the trainers need no barrier among themselves: it tells each one what to
    train and when everything is done. So their gloo setup is switched off, and a trainer that dies
    and is restarted (a restart policy) simply joins again: it pulls the current parameters from
    the pservers (TEST_MODE: it never pushes initial ones over them) and leases tasks again."""
    os.environ["PADDLE_WITH_GLOO"] = "0"
    if int(os.environ.get("PADDLECLOUD_RESTART", "0")) > 0:
        os.environ["TEST_MODE"] = "1"
    warnings.filterwarnings("ignore", message="gloo")  # "gloo is not initialized" at every barrier


def leased_shards(trainer_id, trainers):
    """(pass, shard file) pairs: leased from the job's task master (each acknowledged when the
    caller asks for the next one), or this trainer's own shards when the job has no input."""
    if with_task_master():
        from paddlecloud.runtime import tasks

        for task in tasks():
            yield task.pass_no, task.local_path
        return
    own = [i for i in range(data.SHARDS) if i % trainers == trainer_id]
    files = data.write_shards(os.path.abspath("shards"), keep=own)
    for p in range(EPOCHS):
        for f in files:
            yield p, f


def serve_gloo_store(port, parent_pid):
    """Child process body: the HTTP key-value store gloo uses to rendezvous."""
    from paddle.distributed.fleet.utils.http_server import KVHandler, KVHTTPServer

    store = KVHTTPServer(port, KVHandler)
    threading.Thread(target=store.serve_forever, daemon=True).start()
    while os.getppid() == parent_pid:  # exit with the pserver, even if it is SIGKILLed
        time.sleep(1)


def host_gloo_store_on_pserver0():
    """Serve the gloo HTTP rendezvous store from pserver 0 for its whole life.

    Paddle's own code starts this store inside fleet.init() on pserver 0 and
    blocks there until every trainer has joined, so pserver 0 would not listen
    on its port before trainers start. The platform starts trainers only once
    every pserver listens, so that would deadlock. Pservers do not use gloo
    themselves (only the trainers' barriers do), so we disable Paddle's gloo
    setup on pservers and run the store ourselves, without blocking. It runs
    in a child process: fleet.run_server() holds the GIL, which would starve a
    thread in this process.
    """
    os.environ["PADDLE_WITH_GLOO"] = "0"
    pservers = os.environ["PADDLE_PSERVERS_IP_PORT_LIST"].split(",")
    if os.environ["PADDLE_CURRENT_ENDPOINT"] != pservers[0]:
        return
    port = int(os.environ["PADDLE_GLOO_HTTP_ENDPOINT"].rsplit(":", 1)[1])
    multiprocessing.Process(target=serve_gloo_store, args=(port, os.getpid()), daemon=True).start()
    log(f"gloo HTTP store on port {port}")


def build_model(paddle, fleet):
    """The linear model, its MSE loss and fleet's async PS optimizer (on every worker)."""
    x = paddle.static.data(name="x", shape=[None, NUM_FEATURES], dtype="float32")
    y = paddle.static.data(name="y", shape=[None, 1], dtype="float32")
    pred = paddle.static.nn.fc(
        x,
        size=1,
        weight_attr=paddle.ParamAttr(name="w"),
        bias_attr=paddle.ParamAttr(name="b"),
    )
    loss = paddle.mean(paddle.nn.functional.square_error_cost(pred, y))
    test_program = paddle.static.default_main_program().clone(for_test=True)

    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True  # sync mode segfaults and geo stalls on 2.6.2
    optimizer = fleet.distributed_optimizer(paddle.optimizer.SGD(learning_rate=LEARNING_RATE), strategy)
    optimizer.minimize(loss)
    return x, y, pred, test_program


class Trainer:
    """One trainer: trains shard by shard, reports a loss per pass, saves the model."""

    def __init__(self, paddle, fleet, x, y):
        self.paddle, self.fleet = paddle, fleet
        self.exe = paddle.static.Executor(paddle.CPUPlace())
        self.exe.run(paddle.static.default_startup_program())
        fleet.init_worker()  # trainer 0 pushes initial params; all pull them
        self.dataset = paddle.distributed.QueueDataset()
        self.dataset.init(batch_size=BATCH_SIZE, thread_num=1, use_var=[x, y], pipe_command="cat")
        self.scope = paddle.static.global_scope()
        self.id, self.count = fleet.worker_index(), fleet.worker_num()
        self.all_x, self.all_y = full_data()

    def params(self):
        w = np.array(self.scope.find_var("w").get_tensor()).reshape(-1)
        b = float(np.array(self.scope.find_var("b").get_tensor()).reshape(-1)[0])
        return w, b

    def mse(self, xs=None, ys=None):
        """MSE of the trainer's current parameters (default: on the whole data set), in numpy.

        (Running a separate test program with exe.run between
        train_from_dataset passes crashes Paddle 2.6.2 in the feed op.)
        """
        w, b = self.params()
        xs, ys = (self.all_x, self.all_y) if xs is None else (xs, ys)
        return float(np.mean((xs @ w + b - ys) ** 2))

    def train_shard(self, path):
        self.dataset.set_filelist([path])  # a QueueDataset is consumed once per call
        with contextlib.redirect_stdout(io.StringIO()):  # fleet prints its device worker config each call
            main_program = self.paddle.static.default_main_program()
            self.exe.train_from_dataset(program=main_program, dataset=self.dataset)

    def pass_loss(self, pass_no, shards, started):
        xs, ys = (np.concatenate(a) for a in zip(*(load_shard(f) for f in shards), strict=True))
        loss = self.mse(xs, ys)
        names = ", ".join(os.path.basename(f)[5:10] for f in shards)
        log(f"pass {pass_no}: {len(shards)} shards ({names}), loss {loss:.6f} ({time.time() - started:.1f}s)")
        return loss

    def run(self, pred, x, test_program):
        log(f"trainer {self.id}/{self.count}: initial loss {self.mse():.6f}")
        started, last_loss, current, shards = time.time(), self.mse(), None, []
        for pass_no, shard in leased_shards(self.id, self.count):
            if pass_no != current and shards:
                last_loss, shards = self.pass_loss(current, shards, started), []
            current = pass_no
            self.train_shard(shard)
            shards.append(shard)
        if shards:
            last_loss = self.pass_loss(current, shards, started)
        final = self.save(pred, x, test_program, last_loss)
        if final > TARGET_LOSS:
            log(f"FAILED: final loss {final:.6f} above target {TARGET_LOSS}")
        self.fleet.stop_worker()
        return 0 if final <= TARGET_LOSS else 1

    def save(self, pred, x, test_program, last_loss):
        """Save the model under $PADDLECLOUD_OUTPUT_DIR/model; returns the final loss (trainer 0:
        on the whole data set; the others: their last pass's).

        fleet.save_inference_model is collective over trainers (it has barriers): trainer 0
        pulls the latest dense parameters from the pservers into its scope and writes them with
        the program under model/dnn_plugin/. Trainer 0 also writes a standard inference model
        (paddle.static.load_inference_model)."""
        out_dir = os.path.join(os.environ.get("PADDLECLOUD_OUTPUT_DIR", "."), "model")
        os.makedirs(out_dir, exist_ok=True)
        self.fleet.save_inference_model(self.exe, out_dir, ["x"], [pred])
        if self.id != 0:
            return last_loss
        self.paddle.static.save_inference_model(
            os.path.join(out_dir, "inference"), [x], [pred], self.exe, program=test_program
        )
        final = self.mse()
        w_true, b_true = data.true_params()
        w, b = self.params()
        log(f"saved model to {out_dir}")
        log(f"weight distance {float(np.linalg.norm(w - w_true)):.6f} bias error {abs(b - b_true):.6f}")
        log(f"final loss {final:.6f}")
        return final


def main():
    is_server = os.environ.get("TRAINING_ROLE") == "PSERVER"
    if is_server:
        host_gloo_store_on_pserver0()
    elif with_task_master():
        independent_trainer()
    os.environ.setdefault("GLOG_minloglevel", "1")  # no C++ INFO lines (a set per train_from_dataset)

    import paddle
    import paddle.distributed.fleet as fleet

    paddle.enable_static()
    paddle.seed(SEED)  # deterministic initial parameters (trainer 0's are pushed)
    fleet.init()  # PaddleCloudRoleMaker(is_collective=False) from the env
    x, y, pred, test_program = build_model(paddle, fleet)

    if fleet.is_server():
        log(f"pserver {fleet.server_index()} serving on {os.environ['PADDLE_CURRENT_ENDPOINT']}")
        fleet.init_server()
        fleet.run_server()  # blocks until the process is killed
        return 0
    return Trainer(paddle, fleet, x, y).run(pred, x, test_program)


if __name__ == "__main__":
    sys.exit(main())
