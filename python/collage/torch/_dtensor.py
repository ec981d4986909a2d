"""DTensor parameters (FSDP2's fully_shard, HSDP) for collage.torch's optimizers: which rows of the full
tensor a rank holds, the process group its shards are spread over, and the state words made DTensors
placed as their parameter. PyTorch without DTensor (1.13) has none: is_dtensor is then always False."""

import torch

try:
    from torch.distributed.tensor import DTensor, Replicate, Shard
except ImportError:  # PyTorch 2.0 to 2.3 kept it private
    try:
        from torch.distributed._tensor import DTensor, Replicate, Shard
    except Exception:  # none, or a prototype that does not import (1.13 under Python 3.11): no DTensors
        DTensor = Replicate = Shard = None


def is_dtensor(t):
    return DTensor is not None and isinstance(t, DTensor)


def local(t):
    """A DTensor's local tensor (the memory this rank steps), anything else as it is."""
    return t.to_local() if is_dtensor(t) else t


def chunk_rows(rows, world, rank):
    """The rows [r0, r1) of dim 0 that rank `rank` of `world` holds under torch.chunk's split (FSDP2's):
    ceil(rows / world) each, the last ranks fewer or none."""
    s = -(-rows // world)
    return min(rank * s, rows), min((rank + 1) * s, rows)


class Layout:
    """Where a DTensor parameter's local shard lies: Shard(0) on one mesh dimension (the shard group),
    Replicate on the others. start/full: the shard's first element and the full tensor's size (a range
    of rows of dim 0 is a contiguous range of the flattened tensor); rows(r): rank r's rows; group: the
    process group of the shard dimension."""

    def __init__(self, p, name):
        mesh, placements = p.device_mesh, tuple(p.placements)
        shard = [i for i, x in enumerate(placements) if type(x) is Shard and x.dim == 0]
        other = [x for x in placements if type(x) is not Replicate and not (type(x) is Shard and x.dim == 0)]
        if other or len(shard) != 1 or p.dim() == 0:
            raise ValueError(f"{name} is a DTensor placed {placements} on a mesh of shape {tuple(mesh.shape)}; "
                             "collage.torch steps DTensors placed Shard(0) on one mesh dimension and Replicate on the "
                             "others (FSDP2's fully_shard, HSDP)")
        dim = shard[0]
        self.world, self.rank = mesh.size(dim), mesh.get_local_rank(dim)
        self.group, self.shape = mesh.get_group(dim), tuple(p.shape)
        self.per_row = p.numel() // p.shape[0] if p.shape[0] else 0
        self.full = p.numel()
        r0, r1 = self.rows(self.rank)
        got = tuple(p.to_local().shape)
        if got != (r1 - r0,) + self.shape[1:]:
            raise ValueError(f"{name} is a DTensor of shape {self.shape} sharded over {self.world} ranks, and this rank "
                             f"(coordinate {self.rank}) holds a local tensor of shape {got}; torch.chunk's split gives it "
                             f"rows [{r0}, {r1}): collage.torch steps the split FSDP2 makes")
        self.start = r0 * self.per_row

    def rows(self, rank):
        return chunk_rows(self.shape[0], self.world, rank)

    def span(self, rank):
        """Rank `rank`'s elements of the flattened tensor: (start, count)."""
        r0, r1 = self.rows(rank)
        return r0 * self.per_row, (r1 - r0) * self.per_row

    def rows_of(self, full):
        """This rank's rows of a tensor shaped as the full parameter."""
        r0, r1 = self.rows(self.rank)
        return full[r0:r1]


def like(t, p):
    """t, this rank's part of a tensor shaped and placed as DTensor p, as that DTensor."""
    return DTensor.from_local(t, p.device_mesh, p.placements, run_check=False, shape=p.shape, stride=p.stride())
