"""What the command line changes in a loaded experiment: ``run --repeats N`` and ``run --adaptive`` (or a resumed
run's own adaptive settings), each checked as the experiment file's own keys are."""

from __future__ import annotations

from ..errors import ConfigError
from .adaptive import AdaptiveSpec, check_adaptive
from .experiment import LoadedExperiment
from .limits import MAX_REPEATS, check_whole


def with_repeats(exp: LoadedExperiment, repeats: int | None) -> LoadedExperiment:
    if repeats is None:
        return exp
    problem = check_whole(repeats, 1, MAX_REPEATS)  # the bound of the file's repeats
    if problem:
        raise ConfigError(str(exp.path), "--repeats", problem)
    spec = exp.spec.model_copy(deep=True)
    spec.experiment.repeats = repeats
    check_adaptive(str(exp.path), spec.experiment, "--repeats")
    return exp.model_copy(update={"spec": spec})


def with_adaptive(exp: LoadedExperiment, adaptive: bool | AdaptiveSpec) -> LoadedExperiment:
    """``run --adaptive`` (True): the experiment with adaptive repeats at the defaults of :class:`AdaptiveSpec`,
    unless its file sets them already (then as the file says); an :class:`AdaptiveSpec`: those settings (a resumed
    run's own, as its header recorded them: :class:`~.settings.RunSettings`)."""
    if not adaptive or exp.spec.experiment.adaptive is not None:
        return exp
    spec = exp.spec.model_copy(deep=True)
    if isinstance(adaptive, AdaptiveSpec):  # checked again as the file's keys are (a header's are read as recorded)
        spec.experiment.adaptive = AdaptiveSpec.model_validate(adaptive.model_dump())
    else:
        spec.experiment.adaptive = AdaptiveSpec()
    check_adaptive(str(exp.path), spec.experiment, "--adaptive")
    return exp.model_copy(update={"spec": spec})
