"""The experiment file: TOML in, validated pydantic models out.

The schema in one place: :mod:`.experiment` (the experiment, its arms, cases, probes and timeouts, and
loading a file), :mod:`.overrides` (``run --repeats`` and ``--adaptive``), :mod:`.adaptive`
(``[experiment] adaptive``), :mod:`.stages` (the ``[[load]]``
stages), and the bounds every number and name is held to: :mod:`.limits`, :mod:`.names`; :mod:`.settings`: a run's
settings read back from its ledger header, typed, with these defaults (what analysis and the reports read).
Every problem with an experiment file is reported as a :class:`~leverbench.errors.ConfigError` naming the file,
the key (dotted path, e.g. ``arms[1].engine.kind``) and what is wrong; unknown keys get the nearest valid key as
a suggestion.
"""

from ..trace_formats import TRACE_FORMATS
from .adaptive import AdaptiveSpec
from .experiment import (
    DEFAULT_EXPERIMENT,
    Arm,
    Case,
    EngineSpec,
    Experiment,
    ExperimentSection,
    LoadedExperiment,
    Probes,
    Step,
    TimeoutsSpec,
    Variant,
    load,
)
from .overrides import with_adaptive, with_repeats
from .stages import LoadStage, PlannedStage, check_plans, check_stages, check_trace_paths, expand
from .variants import variant_name

__all__ = ["DEFAULT_EXPERIMENT", "TRACE_FORMATS", "AdaptiveSpec", "Arm", "Case", "EngineSpec", "Experiment",
           "ExperimentSection", "LoadStage", "LoadedExperiment", "PlannedStage", "Probes", "Step", "TimeoutsSpec",
           "Variant", "check_plans", "check_stages", "check_trace_paths", "expand", "load", "variant_name",
           "with_adaptive", "with_repeats"]
