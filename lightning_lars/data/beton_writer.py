"""FFCV's dataset writer made safe to run unattended, and the page-size rule for the files it writes.

- `make_writer_class`: FFCV's ``DatasetWriter`` with one labelled progress bar, writer processes that die with
  their parent, and no hang when one of them dies (a changed file, a full disk: `DiskFull`).
- `default_page_size` / `page_size_for`: FFCV's 8 MiB page for large datasets, its 2 MiB minimum for small ones,
  grown to hold the largest image stored raw.
- `verify_beton`: a written file re-opened with FFCV's Reader and checked against the labels it should hold.

`lightning_lars.data.prepare` drives them. FFCV is imported inside the functions that need it (it imports
numba, seconds).
"""

import errno
import math
import multiprocessing
import os
import queue
import shutil

import numpy as np

from lightning_lars.data.imagefolder import children_ignore_sigint, die_with_parent, load_rgb, progress_bar

# bytes; FFCV's default (4 x 2 MiB), for datasets of more than LARGE_DATASET bytes
DEFAULT_PAGE_SIZE = 1 << 23
# FFCV's smallest page: small datasets get it (each writer process pads its last page)
MIN_PAGE_SIZE = 1 << 21
LARGE_DATASET = 1 << 30  # bytes of raw pixels (upper bound) from which FFCV's default page is used


class LabelledImages:
    """Indexable ``(rgb_uint8, label)`` samples for FFCV's writer processes (inherited by fork)."""

    def __init__(self, samples, max_resolution, seed):
        self.samples, self.max_resolution, self.seed = samples, max_resolution, seed

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path, label = self.samples[index]
        pixels = load_rgb(path, self.max_resolution)
        # RGBImageField draws np.random.rand() right after this call in 'proportion' mode: seeding per
        # index makes the jpg/raw choice of each image the same on every run, whichever worker takes it.
        np.random.seed((self.seed * 1_000_003 + index) % (1 << 32))
        return pixels, label


def make_writer_class():
    from ffcv.writer import DatasetWriter  # FFCV imports numba and takes seconds: import on first use

    class GuardedDatasetWriter(DatasetWriter):
        """FFCV's writer, with one labelled progress bar and no hang when a worker process dies.

        Upstream ``_write_common`` polls a shared counter until it reaches ``num_samples``: a worker that
        raises (a file that changed after the check, a full disk) leaves it waiting forever.
        """

        def __init__(self, *args, description="write", progress=True, **kwargs):
            super().__init__(*args, **kwargs)
            self.description, self.progress = description, progress

        def _write_common(self, num_samples, queue_content, work_fn, extra_worker_args):
            # inside the writer FFCV's DatasetWriter builds on first use (FFCV imports numba, seconds)
            import ctypes

            from ffcv.memory_allocator import MemoryAllocator

            self.num_samples = num_samples
            self.prepare()  # writes header and field descriptors, creates the shared metadata block
            processes = []
            work_queue, allocations_queue = multiprocessing.Queue(), multiprocessing.Queue()
            try:
                for todo in queue_content:
                    work_queue.put(todo)
                for _ in range(self.num_workers):
                    work_queue.put(None)  # one stop token per worker
                done_number = multiprocessing.Value(ctypes.c_uint64, 0)
                allocator = MemoryAllocator(self.fname, self.data_region_start, self.page_size)
                worker_args = (
                    work_queue,
                    self.metadata_sm,
                    self.metadata_type,
                    self.fields,
                    allocator,
                    done_number,
                    allocations_queue,
                    *extra_worker_args,
                )
                processes = [
                    multiprocessing.Process(
                        target=_worker_dying_with_parent, args=(work_fn, *worker_args), daemon=True
                    )
                    for _ in range(self.num_workers)
                ]
                with children_ignore_sigint():
                    for process in processes:
                        process.start()
                allocation_list = []
                with progress_bar(num_samples, self.description, self.progress) as bar:
                    while len(allocation_list) < len(processes):
                        bar.update(done_number.value - bar.n)
                        failed = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
                        if NO_SPACE_EXIT in failed:
                            raise DiskFull(done_number.value)
                        if failed:
                            raise RuntimeError(
                                f"an FFCV writer process exited with code {failed[0]} "
                                "(its traceback is printed above)"
                            )
                        try:  # each worker sends its allocation table once, after its last sample
                            allocation_list.append(allocations_queue.get(timeout=0.1))
                        except queue.Empty:  # not finished yet
                            pass
                    bar.update(done_number.value - bar.n)
                for process in processes:
                    process.join()
                self.finalize([entry for table in allocation_list for entry in table])
            finally:
                for process in processes:
                    if process.is_alive():
                        process.terminate()
                        process.join()
                for channel in (work_queue, allocations_queue):
                    channel.cancel_join_thread()  # else exit waits forever to flush items no process will read
                    channel.close()
                self.metadata_sm.close()
                self.metadata_sm.unlink()

    return GuardedDatasetWriter


# A full disk (or quota) in a writer process: it exits with this code and no traceback; prepare says it in one line.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
NO_SPACE_EXIT = 28


class DiskFull(Exception):
    """A writer process found no space left: ``done`` samples of the split were written by then."""

    def __init__(self, done: int = 0):
        super().__init__(f"no space left after {done} samples")
        self.done = done


def _worker_dying_with_parent(work_fn, *args):
    die_with_parent()  # FFCV's writer processes would outlive a `kill -9` of prepare, ~0.5 GB each
    try:
        work_fn(*args)
    except OSError as error:
        if error.errno not in NO_SPACE:
            raise
        os._exit(NO_SPACE_EXIT)  # the parent names the space needed; a traceback per process would bury it


def no_space_message(out, written, images_done, images_total, buffered, padding):
    """One line for a full disk at ``out``: how much the FFCV files need, and how much is free there (the partial
    files are gone by now). Extrapolated from ``images_done`` images, which took at most the ``written`` bytes
    plus the ``buffered`` bytes of the pages the writers still held, and the ``padding`` bytes of every writer's
    last page, with 10 % to spare: an upper bound, as "free that much" must be enough."""
    free = shutil.disk_usage(out).free
    if images_done:
        per_image = (written + buffered) / images_done
        need = f"about {math.ceil(1.1 * (per_image * images_total + padding) / 2**20):,} MiB"
    else:
        need = f"more than {math.ceil(written / 2**20):,} MiB"
    return (
        f"no space left on the disk of --out {out}: the FFCV files of {images_total} images need {need}, and"
        f" {free / 2**20:,.0f} MiB are free there (the partial files were removed and nothing in {out} was"
        " changed); free that much space, or give --out a folder on a disk with room"
    )


def default_page_size(num_images, largest_hw, max_resolution):
    """FFCV's 8 MiB page for large datasets; its 2 MiB minimum for small ones, where each writer process's
    padded last page would be most of the file (500 small images: 25 MB with 8 MiB pages)."""
    height, width = largest_hw
    if max_resolution is not None and max(height, width) > max_resolution:
        scale = max_resolution / max(height, width)
        height, width = int(height * scale) + 1, int(width * scale) + 1
    return DEFAULT_PAGE_SIZE if num_images * height * width * 3 > LARGE_DATASET else MIN_PAGE_SIZE


def page_size_for(largest_hw, max_resolution, minimum=DEFAULT_PAGE_SIZE):
    """Smallest power-of-two FFCV page (>= ``minimum`` bytes) that holds the largest image stored raw."""
    height, width = largest_hw
    if max_resolution is not None and max(height, width) > max_resolution:
        scale = max_resolution / max(height, width)
        height, width = int(height * scale) + 1, int(width * scale) + 1
    page_size = minimum
    while page_size < height * width * 3 + 4096:  # 3 bytes per RGB pixel, slack for the page header
        page_size *= 2
    return page_size


def verify_beton(path, labels):
    """Re-open ``path`` with FFCV's Reader; raise RuntimeError unless it holds exactly ``labels``."""
    from ffcv.reader import Reader  # FFCV imports numba (seconds): only when a file is verified

    reader = Reader(str(path))
    if reader.num_samples != len(labels):
        raise RuntimeError(f"{path}: {reader.num_samples} samples written, {len(labels)} expected")
    label_column = reader.metadata.dtype.names[reader.field_names.index("label")]
    if not np.array_equal(reader.metadata[label_column], np.asarray(labels)):
        raise RuntimeError(f"{path}: labels differ from the source tree")
    table = reader.alloc_table
    if len(labels) and len(np.unique(table["sample_id"])) != len(labels):
        raise RuntimeError(f"{path}: some images have no data in the allocation table")
    if len(table) and os.path.getsize(path) < int((table["ptr"] + table["size"]).max()):
        raise RuntimeError(f"{path}: file is shorter than its allocation table says (truncated)")
