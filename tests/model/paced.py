"""``python -m tests.model.paced <trainyard argv>``: the trainyard command, each optimizer step
of its training held back ``PACE_S``, so that a signal sent once a checkpoint appears lands while
the training still runs, however busy the machine. The steps and their results are unchanged."""

import sys
import time

from pipeline_steps.commands.cli import main
from pipeline_steps.steps.train import trainer

PACE_S = 0.05


def _paced():  # type: ignore[no-untyped-def]
    real = trainer.epoch_steps

    def epoch_steps(*args, **kwargs):  # type: ignore[no-untyped-def]
        for step in real(*args, **kwargs):
            time.sleep(PACE_S)
            yield step

    return epoch_steps


if __name__ == "__main__":
    trainer.epoch_steps = _paced()
    sys.exit(main(sys.argv[1:]))
