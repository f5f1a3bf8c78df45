"""``python -m tests.model.paced <trainyard argv>``: the trainyard command, each optimizer step
of its training held back ``PACE_S``, so that a signal sent once a checkpoint appears lands while
the training still runs, however busy the machine. The steps and their results are unchanged."""

import sys
import threading
import time

from pipeline_steps.commands.cli import main
from pipeline_steps.steps.train import trainer

PACE_S = 0.05


def _frozen_reader() -> None:
    """Where a frozen reader's stack ends (the watchdog's dump names it)."""
    threading.Event().wait()


def paced(freeze_after: int | None = None):  # type: ignore[no-untyped-def]
    """``trainer.epoch_steps``, each step held back ``PACE_S``; blocking for good once it has
    given ``freeze_after`` steps of an epoch (None: never)."""
    real = trainer.epoch_steps

    def epoch_steps(*args, **kwargs):  # type: ignore[no-untyped-def]
        for given, step in enumerate(real(*args, **kwargs)):
            if given == freeze_after:
                _frozen_reader()
            time.sleep(PACE_S)
            yield step

    return epoch_steps


if __name__ == "__main__":
    trainer.epoch_steps = paced()
    sys.exit(main(sys.argv[1:]))
