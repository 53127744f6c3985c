"""The ingest stages, one module each, and their one interface (:mod:`streams.stages.base`).

The pipeline they make is assembled in one place: :data:`streams.pipeline.INGEST_STAGES` (this
package's stages, in order) and :data:`streams.pipeline.PIPELINE` (every stage of a sample's path,
the correlation and delivery side included).
"""

from streams.stages.base import (
    Batch,
    DeadLetterOut,
    Origin,
    PipelineOutput,
    Round,
    Stage,
    StageRef,
    merged_points_records,
)
from streams.stages.clocks import Clocks
from streams.stages.decode import Decode
from streams.stages.episodes import Episodes
from streams.stages.fabric import Fabric
from streams.stages.normalise import Normalise
from streams.stages.points import Points
from streams.stages.rate import Rate
from streams.stages.score import Score
from streams.stages.validate import Validate

__all__ = ["Batch", "Clocks", "DeadLetterOut", "Decode", "Episodes", "Fabric", "Normalise", "Origin", "PipelineOutput",
           "Points", "Rate", "Round", "Score", "Stage", "StageRef", "Validate", "merged_points_records"]
