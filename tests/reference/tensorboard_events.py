"""Reads a run's TensorBoard folder with the tensorboard package (PyPI): its event file loader (which
checks the TFRecord checksums) for every event in file order, and its EventAccumulator (what the
TensorBoard server uses) for the tags each dashboard shows.

usage: tensorboard_events.py TENSORBOARD_DIR OUTPUT
  OUTPUT a JSON object: files (how many event files), scalars {tag: [[step, value], ...]} and
  texts {tag: [[step, text], ...]} in file order, accumulator {scalars: [tags], tensors: [tags]}
"""
import json
import os
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.util import tensor_util


def main():
    folder, dst = sys.argv[1:3]
    files = sorted(f for f in os.listdir(folder) if f.startswith("events.out.tfevents."))
    scalars, texts = {}, {}
    for name in files:
        for event in EventFileLoader(os.path.join(folder, name)).Load():
            for v in event.summary.value:  # the loader has turned simple_values into scalar-plugin tensors
                plugin = v.metadata.plugin_data.plugin_name
                value = tensor_util.make_ndarray(v.tensor).item()
                if plugin == "scalars":
                    scalars.setdefault(v.tag, []).append([event.step, value])
                else:
                    assert plugin == "text", v.metadata
                    texts.setdefault(v.tag, []).append([event.step, value.decode("utf-8")])
    acc = EventAccumulator(folder, size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    with open(dst, "w") as f:
        json.dump({"files": len(files), "scalars": scalars, "texts": texts,
                   "accumulator": {"scalars": tags["scalars"], "tensors": tags["tensors"]}}, f)


if __name__ == "__main__":
    main()
