"""A base's calibration (evaluation/calibration.py): its extractive thresholds and alias weight, chosen on
its own questions, and back to the service's with one call. Admins of the base only.

    POST   /kbs/{kb}/calibration     choose and store them (synchronous: a bounded number of questions)
    DELETE /kbs/{kb}/calibration     back to the service's EXTRACTIVE_MIN_* and ALIAS_WEIGHT
"""

from fastapi import APIRouter, Depends
from pydantic import Field

from core.contract import StrictModel
from evaluation.calibration import COUNT, MAX_COUNT, MIN_EACH, SEED, Sources, calibrate, own_questions
from evaluation.store import load_questions
from service.deps import AdminBase, Services, ServicesDep, get_caller
from service.http.openapi import error_responses
from service.http.routes.kbs import CalibrationView
from service.kbs import BaseAccess

router = APIRouter(tags=["knowledge bases"], dependencies=[Depends(get_caller)], responses=error_responses(404, 503))

RATED_GAPS = 500  # accepted knowledge gaps read from the answer log at most


class CalibrationRequest(StrictModel):
    count: int = Field(
        COUNT, ge=MIN_EACH, le=MAX_COUNT, description="questions of each side (answerable, to refuse) at most"
    )
    seed: int = Field(SEED, ge=0, le=2**31 - 1, description="which chunks the self-made questions come from")


class CalibrationState(StrictModel):
    kb: str
    calibration: CalibrationView | None = Field(description="the base's own values (null: the service's)")


def _sources(services: Services, base: BaseAccess) -> Sources:
    """The base's question set (its answerable questions) and the knowledge gaps an admin accepted from ratings."""
    stored = load_questions(services.es, services.settings.questions_index, base.kb)
    questions = own_questions(services.retriever, base.scope, stored.parsed) if stored else ()
    logged = services.answers.listed(base.kb, None, "gap", RATED_GAPS)
    gaps = tuple(a.question for a in logged if a.accepted and a.accepted.kind == "gap" and a.question.strip())
    return Sources(questions, tuple(dict.fromkeys(gaps)))


@router.post("/kbs/{kb}/calibration", response_model=CalibrationState, responses=error_responses(422))
def run_calibration(base: AdminBase, services: ServicesDep, body: CalibrationRequest | None = None) -> CalibrationState:
    """Choose the base's extractive thresholds and alias weight on its own questions (its question set and
    rated gaps when it has at least 10 of a side, else questions made from its text) and store them:
    its answers use them from now on. Takes seconds to a minute (every question is answered)."""
    request = body or CalibrationRequest()
    own = _sources(services, base)
    chosen = calibrate(services.retriever, base.scope, services.settings, own, request.count, request.seed)
    services.kbs.write_calibration(base.kb, chosen)
    return CalibrationState(kb=base.kb, calibration=CalibrationView.of(chosen, admin=True))


@router.delete("/kbs/{kb}/calibration", response_model=CalibrationState, responses=error_responses(422))
def reset_calibration(base: AdminBase, services: ServicesDep) -> CalibrationState:
    """Back to the service's thresholds and alias weight on this base."""
    services.kbs.write_calibration(base.kb, None)
    return CalibrationState(kb=base.kb, calibration=None)
