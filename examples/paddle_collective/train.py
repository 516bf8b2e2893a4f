"""PaddlePaddle 3.x collective (fleet data parallel) example job for PaddleCloud.

Trains a small MLP (8 -> 64 -> 64 -> 4) on a synthetic 4-class problem in 8 dimensions (every class a
mixture of 3 Gaussian clusters, made from a fixed seed, so every rank builds the same data set) with
Paddle's collective data parallelism: ``fleet.init(is_collective=True)``, the model wrapped by
``fleet.distributed_model`` (gradients all-reduced after every backward pass: gloo on CPU, NCCL on
GPUs) and each rank training on its own ``DistributedBatchSampler`` shard.

The platform gives each trainer (``--framework paddle-collective``) ``PADDLE_TRAINER_ID``,
``PADDLE_TRAINERS_NUM``, ``PADDLE_TRAINER_ENDPOINTS``, ``PADDLE_CURRENT_ENDPOINT``, ``PADDLE_MASTER``
and ``PADDLE_DISTRI_BACKEND``; the entry is just ``python train.py`` (no ``paddle.distributed.launch``).

The global batch (GLOBAL_BATCH rows per step) is the same at any number of trainers: each rank takes
GLOBAL_BATCH // world rows and the all-reduce averages the gradients, so 1 trainer and N trainers
make the same updates and reach the same loss (up to floating-point order). The loss of each epoch
is averaged over all ranks (an all-reduce) before rank 0 prints it.

Rank 0 prints ``epoch E loss L`` for every epoch, then ``final loss <float>`` and ``final accuracy
<float>`` (on a held-out test set) and saves the parameters to
``$PADDLECLOUD_OUTPUT_DIR/model.pdparams``. Every rank exits 1 if the accuracy is below
TARGET_ACCURACY.
"""

import os
import sys
import time

import numpy as np
import paddle
import paddle.distributed as dist
from paddle import nn
from paddle.distributed import fleet
from paddle.io import DataLoader, DistributedBatchSampler, TensorDataset

SEED = 1234
NUM_CLASSES = 4
NUM_FEATURES = 8
CLUSTERS_PER_CLASS = 3
CLUSTER_SPREAD = 3.0
TRAIN_ROWS = 8000
TEST_ROWS = 2000
EPOCHS = int(os.environ.get("EPOCHS", "8"))
GLOBAL_BATCH = 128
LEARNING_RATE = 0.02
TARGET_ACCURACY = 0.97


def log(msg):
    print(msg, flush=True)


def make_data(rows, rng, centres):
    labels = rng.integers(0, NUM_CLASSES, size=rows)
    cluster = rng.integers(0, CLUSTERS_PER_CLASS, size=rows)
    x = centres[labels, cluster] + rng.standard_normal((rows, NUM_FEATURES))
    return x.astype("float32"), labels.astype("int64")


def datasets():
    rng = np.random.default_rng(SEED)
    centres = rng.standard_normal((NUM_CLASSES, CLUSTERS_PER_CLASS, NUM_FEATURES)) * CLUSTER_SPREAD
    train = make_data(TRAIN_ROWS, rng, centres)
    test = make_data(TEST_ROWS, rng, centres)
    return train, test


def model():
    paddle.seed(SEED)  # the same initial parameters on every rank (fleet broadcasts rank 0's too)
    return nn.Sequential(
        nn.Linear(NUM_FEATURES, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, NUM_CLASSES)
    )


def mean_over_ranks(value, world):
    t = paddle.to_tensor([value], dtype="float64")
    if world > 1:
        dist.all_reduce(t)
    return float(t.numpy()[0]) / world


def main():
    started = time.time()
    gpu = paddle.is_compiled_with_cuda() and os.environ.get("CUDA_VISIBLE_DEVICES", "")
    paddle.set_device("gpu" if gpu else "cpu")  # NCCL then (PADDLE_DISTRI_BACKEND), else gloo
    fleet.init(is_collective=True)
    rank, world = dist.get_rank(), dist.get_world_size()
    log(
        f"rank {rank}/{world} started (master {os.environ.get('PADDLE_MASTER', '-')}, "
        f"backend {os.environ.get('PADDLE_DISTRI_BACKEND', '-')})"
    )
    if GLOBAL_BATCH % world:
        log(f"FAILED: the global batch {GLOBAL_BATCH} does not split over {world} trainers")
        return 1
    (x, y), (tx, ty) = datasets()
    train = TensorDataset([paddle.to_tensor(x), paddle.to_tensor(y)])
    sampler = DistributedBatchSampler(
        train, batch_size=GLOBAL_BATCH // world, shuffle=True, drop_last=True, num_replicas=world, rank=rank
    )
    loader = DataLoader(train, batch_sampler=sampler)
    # one trainer: the plain model (Paddle 3.3.1's distributed_model wraps a world of 1 in a
    # pipeline-parallel layer that accepts only PipelineLayer models)
    net = fleet.distributed_model(model()) if world > 1 else model()
    opt = fleet.distributed_optimizer(
        paddle.optimizer.Momentum(learning_rate=LEARNING_RATE, momentum=0.9, parameters=net.parameters())
    )
    loss_fn = nn.CrossEntropyLoss()
    loss = 0.0
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        net.train()
        total, steps = 0.0, 0
        for xb, yb in loader:
            batch_loss = loss_fn(net(xb), yb)
            batch_loss.backward()
            opt.step()
            opt.clear_grad()
            total, steps = total + float(batch_loss), steps + 1
        loss = mean_over_ranks(total / max(steps, 1), world)
        if rank == 0:
            log(f"epoch {epoch} loss {loss:.6f}")
    net.eval()
    with paddle.no_grad():
        pred = paddle.argmax(net(paddle.to_tensor(tx)), axis=1).numpy()
    accuracy = float((pred == ty).mean())
    if rank == 0:
        out = os.environ.get("PADDLECLOUD_OUTPUT_DIR", ".")
        os.makedirs(out, exist_ok=True)
        paddle.save(net.state_dict(), os.path.join(out, "model.pdparams"))
        log(f"saved parameters to {os.path.join(out, 'model.pdparams')}")
        log(f"final loss {loss:.6f}")
        log(f"final accuracy {accuracy:.4f}")
        log(f"took {time.time() - started:.1f} s")
    if accuracy < TARGET_ACCURACY:
        log(f"FAILED: accuracy {accuracy:.4f} below target {TARGET_ACCURACY}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
