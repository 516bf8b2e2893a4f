"""PaddlePaddle parameter-server example job for PaddleCloud: fit a line.

Linear regression on a synthetic "UCI housing"-like data set (13 features),
trained with fleet in asynchronous parameter-server mode (static graph,
``a_sync=True``). The same program runs as every worker; the role comes from
TRAINING_ROLE (PSERVER | TRAINER) and the other PADDLE_* variables the
platform sets.

The data set is generated deterministically from a fixed seed:
``y = X . w_true + b_true + noise`` (noise std 0.1, so the best achievable
mean squared error is about 0.01). Each trainer writes its own shard (rows
``i`` with ``i % PADDLE_TRAINERS_NUM == PADDLE_TRAINER_ID``) into its working
directory and feeds it through a QueueDataset with ``exe.train_from_dataset``
(plain ``exe.run`` does not pull parameters back from the pservers in this
mode).

Trainers print ``epoch N loss X`` after every epoch (MSE of the current
parameters on the trainer's shard). Trainer 0 then prints ``final loss X``
and the distance of the learned weights from ``w_true``, and saves an
inference model under ``$PADDLECLOUD_OUTPUT_DIR/model``. A trainer exits 1 if
the final loss misses TARGET_LOSS. Pservers serve until they are killed.
"""

import multiprocessing
import os
import sys
import threading
import time

import numpy as np

SEED = 2024
NUM_ROWS = 20000
NUM_FEATURES = 13
NOISE_STD = 0.1
EPOCHS = 5
BATCH_SIZE = 32
LEARNING_RATE = 0.005  # 0.05 diverges under async PS updates
TARGET_LOSS = 0.05  # noise floor is NOISE_STD ** 2 = 0.01


def log(msg):
    print(msg, flush=True)


def true_params():
    rng = np.random.RandomState(SEED)
    w = rng.uniform(-2.0, 2.0, size=NUM_FEATURES).astype("float32")
    b = np.float32(1.5)
    return w, b


def make_shard(trainer_id, trainers):
    """Generate the full data set and return this trainer's rows."""
    w, b = true_params()
    rng = np.random.RandomState(SEED + 1)
    x = rng.normal(size=(NUM_ROWS, NUM_FEATURES)).astype("float32")
    y = x @ w + b + rng.normal(scale=NOISE_STD, size=NUM_ROWS).astype("float32")
    return x[trainer_id::trainers], y[trainer_id::trainers].reshape(-1, 1)


def write_multislot(path, x, y):
    """MultiSlot text format used by QueueDataset: '<n> v1..vn' per slot."""
    with open(path, "w") as f:
        for xi, yi in zip(x, y, strict=True):
            f.write(f"{NUM_FEATURES} {' '.join(f'{v:.6f}' for v in xi)} 1 {yi[0]:.6f}\n")


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


def main():
    is_server = os.environ.get("TRAINING_ROLE") == "PSERVER"
    if is_server:
        host_gloo_store_on_pserver0()

    import paddle
    import paddle.distributed.fleet as fleet

    paddle.enable_static()
    paddle.seed(SEED)  # deterministic initial parameters (trainer 0's are pushed)
    fleet.init()  # PaddleCloudRoleMaker(is_collective=False) from the env

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

    if fleet.is_server():
        log(f"pserver {fleet.server_index()} serving on {os.environ['PADDLE_CURRENT_ENDPOINT']}")
        fleet.init_server()
        fleet.run_server()  # blocks until the process is killed
        return 0

    trainer_id, trainers = fleet.worker_index(), fleet.worker_num()
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(paddle.static.default_startup_program())
    fleet.init_worker()  # trainer 0 pushes initial params; all pull them

    shard_x, shard_y = make_shard(trainer_id, trainers)
    shard_file = os.path.abspath(f"part-{trainer_id:05d}.txt")
    write_multislot(shard_file, shard_x, shard_y)
    dataset = paddle.distributed.QueueDataset()
    dataset.init(batch_size=BATCH_SIZE, thread_num=1, use_var=[x, y], pipe_command="cat")
    log(f"trainer {trainer_id}/{trainers}: {len(shard_x)} rows in {shard_file}")

    scope = paddle.static.global_scope()

    def current_params():
        w = np.array(scope.find_var("w").get_tensor()).reshape(-1)
        b = float(np.array(scope.find_var("b").get_tensor()).reshape(-1)[0])
        return w, b

    def shard_loss():
        """MSE of the trainer's current parameters on its shard, in numpy.

        (Running a separate test program with exe.run between
        train_from_dataset passes crashes Paddle 2.6.2 in the feed op.)
        """
        w, b = current_params()
        return float(np.mean((shard_x @ w + b - shard_y[:, 0]) ** 2))

    log(f"initial loss {shard_loss():.6f}")
    start = time.time()
    for epoch in range(EPOCHS):
        dataset.set_filelist([shard_file])  # a QueueDataset is consumed once per pass
        exe.train_from_dataset(program=paddle.static.default_main_program(), dataset=dataset)
        last_loss = shard_loss()
        log(f"epoch {epoch} loss {last_loss:.6f} ({time.time() - start:.1f}s)")

    # Collective over trainers (it has barriers): trainer 0 pulls the latest
    # dense parameters from the pservers into its scope and writes them with
    # the program under model/dnn_plugin/.
    out_dir = os.path.join(os.environ.get("PADDLECLOUD_OUTPUT_DIR", "."), "model")
    os.makedirs(out_dir, exist_ok=True)
    fleet.save_inference_model(exe, out_dir, ["x"], [pred])
    final = last_loss
    if trainer_id == 0:
        # Also a standard inference model (paddle.static.load_inference_model).
        paddle.static.save_inference_model(
            os.path.join(out_dir, "inference"), [x], [pred], exe, program=test_program
        )
        final = shard_loss()
        w_true, b_true = true_params()
        w, b = current_params()
        log(f"saved model to {out_dir}")
        w_dist = float(np.linalg.norm(w - w_true))
        log(f"weight distance {w_dist:.6f} bias error {abs(b - b_true):.6f}")
        log(f"final loss {final:.6f}")
    ok = final <= TARGET_LOSS
    if not ok:
        log(f"FAILED: final loss {final:.6f} above target {TARGET_LOSS}")
    fleet.stop_worker()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
