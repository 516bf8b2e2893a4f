"""PyTorch DDP (gloo, CPU) example job for PaddleCloud.

Trains a small MLP on a synthetic 4-class classification problem in 8
dimensions: every class is a mixture of 3 Gaussian clusters, so the classes are
not linearly separable (a linear model reaches only ~0.82 test accuracy; the
MLP ~0.99). The data is generated from a fixed seed, so every worker builds the
identical data set. Each rank trains on its own shard via
DistributedSampler; gradients are averaged by DistributedDataParallel.

Two ways to run it, same code:
- fixed size (``--entry "python train.py"``): the platform supplies MASTER_ADDR,
  MASTER_PORT, WORLD_SIZE and RANK; the process group uses env://.
- elastic (``--entry "torchrun train.py" --min-instance 1 --max-instance 4``):
  every trainer is a torchrun agent on the platform's rendezvous store; when
  trainers join, leave or die, torchrun restarts the worker group with the new
  world size and this program resumes from its last checkpoint.

The global batch (GLOBAL_BATCH rows per step) is the same at any world size:
each rank takes GLOBAL_BATCH // world rows, so a resize never changes the
training semantics. Rank 0 checkpoints model, optimizer and epoch after every
epoch with paddlecloud.runtime.checkpoint (atomic, last 3 kept, in
$PADDLECLOUD_CHECKPOINT_DIR); on start rank 0 loads the newest valid one and
broadcasts it, so every rank resumes from the same state.

Adaptive mode (``--env ADAPTIVE=1``, for a job submitted with
``--batch-size N --adaptive-batch-size MIN:MAX``): the scheduler chooses the
global batch; paddlecloud.runtime.AdaptiveDDP reads it at every start
(so at every membership change) and, when the scheduler changes only the batch,
during the training (all ranks switch after the same step, no restart), splits
it over the ranks (gradient accumulation above MAX_LOCAL_BATCH rows per rank),
scales the learning rate by the AdaScale gain and reports the gradient noise
scale it measures. The training
length is EPOCHS epochs at the initial batch: it stops when the progress (the
sum of the gains x the initial batch) reaches EPOCHS x TRAIN_ROWS, so a larger
batch that is worth less than its size trains more epochs of data.

Rank 0 prints ``final loss <float>`` and ``final accuracy <float>`` (accuracy
on a held-out test set, evaluated by all ranks and all-reduced) and saves the
model's state_dict to ``$PADDLECLOUD_OUTPUT_DIR/model.pt``. The program exits
with status 1 if the test accuracy is below TARGET_ACCURACY.
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

SEED = 1234
NUM_CLASSES = 4
NUM_FEATURES = 8
CLUSTERS_PER_CLASS = 3
CLUSTER_SPREAD = 3.0  # scale of the cluster centres; cluster noise has std 1
TRAIN_ROWS = 8000
TEST_ROWS = 2000
EPOCHS = int(os.environ.get("EPOCHS", "8"))
GLOBAL_BATCH = 128  # rows per optimizer step, over all ranks
LEARNING_RATE = 0.02
TARGET_ACCURACY = 0.97
# Rank 0 prints "step S epoch E world W at T started T0" every PROGRESS_EVERY optimizer steps (T:
# wall-clock seconds, T0: when this worker process started); 0 (the default): no step lines.
# bench/torch_recovery.py reads them to see training steps flow again after a trainer is killed.
PROGRESS_EVERY = int(os.environ.get("PROGRESS_EVERY", "0"))
# Adaptive mode: the initial global batch and its learning rate when the platform names none (a job
# submitted without --batch-size), and the most rows one rank computes at once.
ADAPTIVE = os.environ.get("ADAPTIVE", "0") not in ("", "0")
ADAPTIVE_BATCH = 32
ADAPTIVE_LR = 0.02
MAX_LOCAL_BATCH = int(os.environ.get("MAX_LOCAL_BATCH", "256"))


def log(msg):
    print(msg, flush=True)


def make_dataset():
    """Deterministic Gaussian mixture: cluster c belongs to class c % NUM_CLASSES."""
    gen = torch.Generator().manual_seed(SEED)
    num_clusters = NUM_CLASSES * CLUSTERS_PER_CLASS
    centers = torch.randn(num_clusters, NUM_FEATURES, generator=gen) * CLUSTER_SPREAD
    n = TRAIN_ROWS + TEST_ROWS
    cluster = torch.randint(0, num_clusters, (n,), generator=gen)
    features = centers[cluster] + torch.randn(n, NUM_FEATURES, generator=gen)
    labels = cluster % NUM_CLASSES
    train = TensorDataset(features[:TRAIN_ROWS], labels[:TRAIN_ROWS])
    test = TensorDataset(features[TRAIN_ROWS:], labels[TRAIN_ROWS:])
    return train, test


def resume(model, optimizer, rank, ada=None):
    """Rank 0 reads the newest valid checkpoint and broadcasts it; returns the epoch to start at."""
    state = [None]
    if rank == 0:
        try:
            from paddlecloud.runtime import checkpoint
        except ImportError:  # run outside PaddleCloud: no checkpoints
            checkpoint = None
        found = checkpoint.latest() if checkpoint else None
        if found is not None:
            state[0] = torch.load(found.path, weights_only=True)
    dist.broadcast_object_list(state, src=0)
    if state[0] is None:
        return 0
    model.module.load_state_dict(state[0]["model"])
    optimizer.load_state_dict(state[0]["optimizer"])
    if ada is not None and "adaptive" in state[0]:
        ada.load_state_dict(state[0]["adaptive"])
    log(f"rank {rank} resumed from checkpoint after epoch {state[0]['epoch'] - 1}")
    return state[0]["epoch"]


def save_checkpoint(model, optimizer, epoch, ada=None):
    try:
        from paddlecloud.runtime import checkpoint
    except ImportError:
        return
    state = {"epoch": epoch, "model": model.module.state_dict(), "optimizer": optimizer.state_dict()}
    if ada is not None:
        state["adaptive"] = ada.state_dict()
    checkpoint.save(epoch, lambda f: torch.save(state, f))


def adaptive_setup(model, optimizer, rank):
    """Adaptive mode: the runtime's helper, at the batch the scheduler assigned (None otherwise)."""
    if not ADAPTIVE:
        return None
    from paddlecloud.runtime import AdaptiveDDP

    for group in optimizer.param_groups:
        group["lr"] = ADAPTIVE_LR
    ada = AdaptiveDDP(model, optimizer, batch=ADAPTIVE_BATCH, max_local_batch=MAX_LOCAL_BATCH)
    if rank == 0:
        log(f"adaptive: {ada.describe()}")
    return ada


def adaptive_epoch(ada, model, loader, loss_fn, stats):
    """One pass over this rank's shard (or less: until the progress reaches the target)."""
    target = EPOCHS * TRAIN_ROWS
    for micro_batches in ada.group(loader):
        loss = ada.step(micro_batches, lambda b: loss_fn(model(b[0]), b[1]) / len(b[1]))
        rows = sum(len(b[1]) for b in micro_batches)
        stats += torch.tensor([loss * rows, rows], dtype=torch.float64)
        if ada.progress >= target:
            break


def main():
    started = time.time()
    # Workers share two cores: one intra-op thread each avoids oversubscription.
    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # env:// from MASTER_ADDR/PORT, WORLD_SIZE, RANK (torchrun sets them too)
    rank, world = dist.get_rank(), dist.get_world_size()
    master = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    restarts = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    log(f"rank {rank}/{world} started (master {master}, group restart {restarts})")

    train_set, test_set = make_dataset()
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=SEED)

    torch.manual_seed(SEED)  # same init everywhere (DDP also broadcasts rank 0's weights)
    model = DistributedDataParallel(
        nn.Sequential(
            nn.Linear(NUM_FEATURES, 64),
            nn.ReLU(),
            nn.Linear(64, 64),
            nn.ReLU(),
            nn.Linear(64, NUM_CLASSES),
        )
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    ada = adaptive_setup(model, optimizer, rank)
    if ada is not None:  # the micro-batch is read at every batch: a new one applies mid-epoch
        loader = DataLoader(train_set, batch_sampler=ada.batch_sampler(sampler))
    else:
        loader = DataLoader(train_set, batch_size=max(GLOBAL_BATCH // world, 1), sampler=sampler)
    first = resume(model, optimizer, rank, ada)

    start = time.time()
    train_loss = float("nan")
    epoch = first
    while (ada.progress < EPOCHS * TRAIN_ROWS) if ada else (epoch < EPOCHS):
        sampler.set_epoch(epoch)
        model.train()
        # [sum of loss, number of rows] over this rank's shard, summed over ranks below.
        stats = torch.zeros(2, dtype=torch.float64)
        if ada is not None:
            adaptive_epoch(ada, model, loader, loss_fn, stats)
        else:
            for i, (x, y) in enumerate(loader):
                optimizer.zero_grad()
                loss = loss_fn(model(x), y)
                (loss / len(y)).backward()
                optimizer.step()
                stats += torch.tensor([loss.item(), len(y)], dtype=torch.float64)
                step = epoch * len(loader) + i + 1
                if PROGRESS_EVERY and rank == 0 and step % PROGRESS_EVERY == 0:
                    log(f"step {step} epoch {epoch} world {world} at {time.time():.3f} started {started:.3f}")
        dist.all_reduce(stats)
        train_loss = (stats[0] / stats[1]).item()
        test_loss, test_acc = evaluate(model, test_set, rank, world, loss_fn)
        if rank == 0:
            log(
                f"epoch {epoch} loss {train_loss:.4f} test_loss {test_loss:.4f} "
                f"test_accuracy {test_acc:.4f} world {world} ({time.time() - start:.1f}s)"
            )
            if ada is not None:
                log(f"epoch {epoch} progress {ada.progress / TRAIN_ROWS:.2f} {ada.describe()}")
            save_checkpoint(model, optimizer, epoch + 1, ada)
        epoch += 1

    test_loss, test_acc = evaluate(model, test_set, rank, world, loss_fn)
    ok = test_acc >= TARGET_ACCURACY
    if ada is not None:
        ada.close()
    if rank == 0:
        out_dir = os.environ.get("PADDLECLOUD_OUTPUT_DIR", ".")
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, "model.pt")
        torch.save(model.module.state_dict(), path)
        log(f"saved state_dict to {path}")
        log(f"final loss {train_loss:.6f}" if epoch > first else f"final test_loss {test_loss:.6f}")
        log(f"final accuracy {test_acc:.4f}")
        if not ok:
            log(f"FAILED: accuracy {test_acc:.4f} below target {TARGET_ACCURACY}")
    dist.barrier()  # keep the group alive until rank 0 has saved
    dist.destroy_process_group()
    return 0 if ok else 1


@torch.no_grad()
def evaluate(model, test_set, rank, world, loss_fn):
    """Each rank scores a strided slice of the test set; results are all-reduced."""
    model.eval()
    x, y = test_set.tensors
    x, y = x[rank::world], y[rank::world]
    logits = model.module(x)
    stats = torch.tensor(
        [loss_fn(logits, y).item(), (logits.argmax(1) == y).sum().item(), len(y)],
        dtype=torch.float64,
    )
    dist.all_reduce(stats)
    return (stats[0] / stats[2]).item(), (stats[1] / stats[2]).item()


if __name__ == "__main__":
    code = main()
    # Exit without running interpreter teardown: gloo's background threads can abort the process
    # ("terminate called without an active exception") while Python destroys them, turning a
    # finished, successful run into a failed one.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
