"""``python -m tests.model.frozen_reader STEPS -- <trainyard argv>``: the trainyard command, its
training's data reader slow (``SLOW_S`` a step, so that the steps take long enough to be
watched) and blocking for good once it has given ``STEPS`` optimizer steps, as a reader on a
hung mount or a dead socket does."""

import sys
import threading
import time

from pipeline_steps.commands.cli import main
from pipeline_steps.steps.train import trainer

SLOW_S = 0.05


def _frozen_reader() -> None:
    threading.Event().wait()


def _freezing(steps: int):  # type: ignore[no-untyped-def]
    real = trainer.epoch_steps

    def epoch_steps(*args, **kwargs):  # type: ignore[no-untyped-def]
        for given, step in enumerate(real(*args, **kwargs)):
            if given == steps:
                _frozen_reader()
            time.sleep(SLOW_S)
            yield step

    return epoch_steps


if __name__ == "__main__":
    trainer.epoch_steps = _freezing(int(sys.argv[1]))
    sys.exit(main(sys.argv[3:]))
