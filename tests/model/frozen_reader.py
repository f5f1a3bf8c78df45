"""``python -m tests.model.frozen_reader STEPS -- <trainyard argv>``: the trainyard command, its
training's data reader slow (``tests.model.paced``: ``PACE_S`` a step, so that the steps take
long enough to be watched) and blocking for good once it has given ``STEPS`` optimizer steps, as
a reader on a hung mount or a dead socket does."""

import sys

from pipeline_steps.commands.cli import main
from pipeline_steps.steps.train import trainer
from tests.model.paced import paced

if __name__ == "__main__":
    trainer.epoch_steps = paced(freeze_after=int(sys.argv[1]))
    sys.exit(main(sys.argv[3:]))
