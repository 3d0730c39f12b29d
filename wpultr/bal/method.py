"""BAL: bias-agnostic whole-page unbiased learning to rank (WWW 2024, §3), one epoch at a time.

Each epoch, with the current ranker f_Θ:
1. score every shown result: r̂ = f_Θ(q, d);
2. learn the click model's graph over r̂, the page features and c (PC + CI test with the three
   priors, on sampled sessions, §3.1) — or take the variant's fixed graph (`bal.graph`);
3. read the biases off it (confounded features with their parents, page-feature → click), leaving out
   the page features fixed for the same document, whose effect the logs cannot tell from relevance
   (`separability`, beyond the paper);
4. fit one influence estimator p(x | parents) per confounded feature (Eq. 6–7) and the importance
   weights that cut r̂ → x (Eq. 8–9 and case 2, product over features, Eq. 10);
5. fit the click model φ_c by the weighted likelihood of Eq. 10 with r̂ fixed;
6. update Θ by the same weighted likelihood with the page-feature path blocked
   (`click_model.ranker_loss`), so the ranker learns only relevance → click; with `train.loss:
   listwise` (beyond the paper) by the IPW softmax loss over each session instead, each click weighted
   by w / σ(v(page)) (`listwise_click_weights`): the page's examination divided out, as IPW divides by
   a position propensity, and the page path blocked just the same (v is a constant of the step); with
   `train.loss: lambdarank` (LightGBM backbone) by LambdaMART's λ-gradients over clicked-over-skipped pairs,
   weighted per `bal.pair_weights` (`click_side_weights`): by the chance, under the click model (u with its
   document offsets), that the skipped result was skipped for irrelevance rather than unseen (posterior, the
   default: it removes the skip side's bias without the click side's 1/σ(v) variance; the click side weighs 1,
   as in the step with the true click model that bench/bal.py's Oracle-skip-GBDT runs), that times the click's
   w (skip), the click's ω (click), or ω times that chance (both).
The graph step samples the same sessions every epoch and re-runs only the CI tests that involve r̂;
the influence estimators are refitted on the same rows, warm-started from the previous epoch's.
The ranker first gets BAL's warm-up (naive click loss, plus masked LM for BERT; `train.warmup_epochs`).
With `ranker.backbone: lightgbm` (beyond the paper) the ranker is a LightGBM booster: warm-up and step 6
each add `ranker.lightgbm.rounds_per_epoch` trees fitted to the gradient and Hessian of the same losses
in r̂ (`losses.boosted`, `training.gbdt`).
With `train.streaming` (MLP backbone) the ranker's inputs stay in the Parquet partitions (`fit_streamed`): BAL
holds the per-row columns it reads itself (`streamed_columns`) and its per-row arrays, and steps 1 and 6 read the
features unit by unit (`methods.training.streaming`).
Every epoch's graph, biases, weight diagnostics, losses and validation metrics are recorded.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from ..causal.biases import BiasReport, identify_biases
from ..causal.discovery import ReusableTests, discover
from ..causal.graph import DIRECTED, DiscoveredGraph, GraphEdge
from ..cluster import current_client
from ..errors import ConfigError
from ..io.parquet import column_names, partition_paths
from ..methods.base import FitResult
from ..methods.losses import boosted as boosted_losses
from ..methods.losses import click_loss_named
from ..methods.training.distributed import RankBatches, fit_data_parallel, on_rank0, rank_ranker_and_table
from ..methods.training.gbdt import BoostingTrainer
from ..methods.training.ranks import rank_client
from ..methods.training.streaming import streaming_trainer
from ..methods.training.trainer import Trainer, build_ranker
from ..methods.training.warmup import warm_up
from ..rankers.base import resolve_device
from ..rundir.epochs import GRAPH_EPOCH, is_graph_epoch
from ..schema import CLICK, DOC_ID, POSITION, QUERY_ID, RELEVANCE_SCORE, SESSION_ID, FeatureKind, PageFeature
from ..settings.methods import BACKBONES, LOSSES
from .click_model import ClickModel, examination_table, page_inputs, ranker_loss, skipped_irrelevance
from .column_sources import PartitionColumns
from .cpu_threads import torch_threads
from .influence import FeatureInfluence, estimators_from_state, fit_influence_estimators, influence_state
from .rows import GraphRows, TrainingRows, discovery_seed
from .weights import clip_and_normalise, importance_weights

if TYPE_CHECKING:
    from ..config import RunConfig
    from .node_columns import NodeColumns

WEIGHTS, PAGE_LOGITS = "weights", "page_logits"

log = logging.getLogger(__name__)


def streamed_columns(config: RunConfig, available: Sequence[str]) -> list[str]:
    """The per-row columns BAL reads itself when the ranker's inputs stream from the partitions (`fit_streamed`):
    ids, position, click and the declared page features; never the features or token lists."""
    wanted = [SESSION_ID, QUERY_ID, DOC_ID, POSITION, CLICK, *config.data.declared_page_features()]
    return [c for c in dict.fromkeys(wanted) if c in set(available)]


def fixed_graph(kind: str, features: Sequence[PageFeature]) -> DiscoveredGraph:
    """PB-BAL's graph (position → c, r̂ → c) or FB-BAL's (r̂ → every feature → c, r̂ → c)."""
    names = [f.name for f in features]
    edges = [GraphEdge(RELEVANCE_SCORE, CLICK, DIRECTED)]
    if kind == "position":
        nodes = (RELEVANCE_SCORE, POSITION, CLICK)
        edges.append(GraphEdge(POSITION, CLICK, DIRECTED))
        kinds = {POSITION: next(f.kind.value for f in features if f.name == POSITION)}
    else:
        nodes = (RELEVANCE_SCORE, *names, CLICK)
        edges += ([GraphEdge(RELEVANCE_SCORE, n, DIRECTED) for n in names]
                  + [GraphEdge(n, CLICK, DIRECTED) for n in names])
        kinds = {f.name: f.kind.value for f in features}
    return DiscoveredGraph(nodes, tuple(edges), {RELEVANCE_SCORE: "relevance", CLICK: "click", **kinds},
                           meta={"fixed": kind})


def scoring_rows(config: RunConfig) -> int:
    """Rows scored per forward pass when r̂ is computed for every shown result: large for the MLP (a few
    thousand calls instead of a million rows' worth of small ones), the training batch × 8 for BERT."""
    batch = config.train.batch_size * 8
    return batch if BACKBONES[config.ranker.backbone].reads_tokens else max(batch, 16384)


def click_model_rows(n_rows: int, max_rows: int | None, seed: int) -> np.ndarray:
    """Rows the click model is fitted on: all of them, or max_rows drawn without replacement (sorted)."""
    if max_rows is None or n_rows <= max_rows:
        return np.arange(n_rows)
    return np.sort(np.random.default_rng([seed, 7]).choice(n_rows, size=max_rows, replace=False))


def listwise_click_weights(weights: np.ndarray, page_logits: np.ndarray, max_weight: float | None) -> np.ndarray:
    """ω = w / σ(v) for BAL's listwise ranker step, mean 1 and capped at `max_weight` (`bal.weights`).

    Under the multiplicative click model p(c) = σ(u(r̂))·σ(v(page)), σ(v) is the page's share of the click
    (its examination): dividing each click by it, as IPW divides by a position propensity, leaves an
    expected target proportional to σ(u), relevance alone; w cuts the r̂ → page-feature backdoor (Eq. 10).
    """
    log_examination = -np.logaddexp(0.0, -np.asarray(page_logits, np.float64))        # log σ(v), stable
    omega = np.asarray(weights, np.float64) * np.exp(-(log_examination - log_examination.max()))
    return clip_and_normalise(omega, max_weight)[0]


def click_side_weights(loss: str, pair_weights: str, weights: np.ndarray, page_logits: np.ndarray,
                       max_weight: float | None) -> np.ndarray:
    """What each click weighs in a click-reweighting ranker step (`train.loss` listwise or lambdarank): the click's
    ω = w/σ(v) (`listwise_click_weights`; lambdarank with `bal.pair_weights` click or both), its importance weight
    w alone (skip: the skipped side carries the page's bias) or 1 (posterior: the skipped side carries all of it)."""
    if LOSSES[loss].boosted_only and pair_weights == "posterior":
        return np.ones(len(weights))
    if LOSSES[loss].boosted_only and pair_weights == "skip":
        return np.asarray(weights, np.float64)
    return listwise_click_weights(weights, page_logits, max_weight)


def examination_by_position(table: dict) -> dict[str, float]:
    """The click model's examination σ(v) by position relative to the first (`examination_table`'s point estimates):
    the position bias BAL learned, recorded every epoch so a user can read it (and a bench can hold it to the truth)."""
    return {position: round(cell["relative"], 4) for position, cell in table["by_position"].items()}


class StepClock:
    """Seconds spent in each step of an epoch, so a slow epoch says where its time went."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.laps[step] = round(now - self._last, 3)
        self._last = now


def _current_client() -> Any:
    """The Dask client the pipeline runs on, if any: discovery spreads its CI tests over it.

    Without one (BAL fitted outside a pipeline) discovery runs serially here, and says so."""
    client = current_client() or rank_client()     # in a DDP rank: the run's scheduler, which the launcher names
    if client is None:
        log.warning("BAL: no Dask client found; causal discovery runs its CI tests serially in this process")
    return client


class EpochState:
    """What BAL carries from epoch to epoch, for the trainer's checkpoint (`Trainer.keep`): each finished epoch's
    graph, and the influence estimators the next epoch warm-starts from (tensors and JSON text only)."""

    def __init__(self) -> None:
        self.graphs: list[DiscoveredGraph] = []
        self.estimators: dict[str, FeatureInfluence] = {}

    def state_dict(self) -> dict[str, Any]:

        meta, arrays = influence_state(self.estimators)
        return {"graphs": json.dumps([g.to_dict() for g in self.graphs]), "estimators": json.dumps(meta),
                **{f"estimator.{k}": torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:

        self.graphs = [DiscoveredGraph.from_dict(g) for g in json.loads(state["graphs"])]
        arrays = {k[len("estimator."):]: v.numpy() for k, v in state.items() if k.startswith("estimator.")}
        self.estimators = estimators_from_state(json.loads(state["estimators"]), arrays, "train/checkpoint.pt")


class BAL:
    name = "bal"

    def fit(self, train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig) -> FitResult:
        """BAL on an in-memory sessions table (every column the ranker reads)."""
        train = train.reset_index(drop=True)
        if config.train.processes > 1:       # DDP ranks, each scoring, weighting and stepping on its share
            return fit_data_parallel(train, valid, config)
        if BACKBONES[config.ranker.backbone].boosts:
            trainer = self.booster_trainer(train, valid, config)
            trainer.warm_up()
        else:
            # here: it imports transformers, which a booster never needs
            trainer = Trainer(build_ranker(config, train), train, valid, config)
            warm_up(trainer)
        return self.epochs(trainer, TrainingRows.build(train, config), config)

    def fit_streamed(self, directory: Any, valid: pd.DataFrame | None, config: RunConfig,
                     prepare: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
                     prepare_columns: Sequence[str] = ()) -> FitResult:
        """BAL with the ranker's inputs streamed from the Parquet partitions of `directory` (`train.streaming`).

        `TrainingRows` are built from the partitions a few columns at a time (`column_sources.PartitionColumns`:
        only the per-row columns BAL reads itself, `streamed_columns`, text ids as int32 codes) and spilled to local
        disk. `prepare` (the train stage's identifiability pre-flight: before the warm-up, so a refusal costs no
        training) runs first on `prepare_columns`; the columns it changes (merged bias factors) are read from its
        output from then on. The ranker is warmed up, scored and trained unit by unit, each batch gathering its
        rows' weights and page logits."""
        source = PartitionColumns([str(p) for p in partition_paths(directory)],
                                  streamed_columns(config, column_names(directory)))
        if prepare is not None:
            source = source.prepared(prepare, prepare_columns or source.columns)
        if config.train.processes > 1:     # the ranks read the partitions, and the pre-flight's merges from here
            return fit_data_parallel(directory, valid, config, overrides=source.overrides)
        rows = TrainingRows.build(source, config, spill=True)
        return self.epochs(streaming_trainer(directory, valid, config), rows, config)

    def fit_rank(self, sessions: Any, valid: pd.DataFrame | None, config: RunConfig, trainer_class: type,
                 arrow_lists: Sequence[str] = (), overrides: dict[str, np.ndarray] | None = None) -> FitResult:
        """One DDP rank's BAL (`training.distributed`: the process group is up): the same rows and warm-up as one
        process; each epoch's scores and ranker step on this rank's share, the graph and the influence estimators
        fitted by rank 0 and sent to all, the click model stepped as DDP (`epochs`' `ranks`)."""
        if config.train.streaming:
            source = PartitionColumns([str(p) for p in partition_paths(sessions)],
                                      streamed_columns(config, column_names(sessions)), overrides)
            rows = TrainingRows.build(source, config, spill=True)
            return self.epochs(streaming_trainer(sessions, valid, config, trainer_class), rows, config,
                               RankBatches())
        ranker, train = rank_ranker_and_table(sessions, config, arrow_lists)
        train = train.reset_index(drop=True)
        trainer = trainer_class(ranker, train, valid, config)
        warm_up(trainer)
        return self.epochs(trainer, TrainingRows.build(train, config), config, RankBatches())

    def epochs(self, trainer: Any, rows: TrainingRows, config: RunConfig, ranks: Any = None) -> FitResult:
        """BAL's epochs (steps 1–6 of the module doc) on a warmed-up trainer whose training rows are `rows`'. In a
        DDP rank (`ranks`: `training.distributed.RankBatches`, `trainer` a DataParallelTrainer), rank 0 alone fits
        the graph and the influence estimators and sends them to the others (`on_rank0`), the scores are each
        rank's share summed over the ranks, and the click model and the ranker step as DDP."""
        features, kinds, n_categories, separable = rows.features, rows.kinds, rows.n_categories, rows.separable
        boosted = BACKBONES[config.ranker.backbone].boosts
        once: Callable[[Callable[[], Any]], Any] = lambda fit: fit()   # noqa: E731
        if ranks is not None:
            once = on_rank0
        lead = ranks is None or ranks.rank == 0
        client = _current_client() if config.bal.graph == "discovered" and lead else None
        device = getattr(trainer, "device", None) or resolve_device(config.train.device)   # BAL's own networks' too
        state = EpochState()        # the graphs so far and the estimators to warm-start from
        if hasattr(trainer, "keep"):     # the shared trainer's checkpoint holds them (a booster's trainer: none)
            trainer.keep("bal", state)
            todo = trainer.epoch_range(config.train.epochs)
            first = todo.stop - config.train.epochs       # the step of BAL epoch 0
        else:
            first = len(trainer.history)
            todo = range(first, first + config.train.epochs)
        graphs = state.graphs
        reuse: ReusableTests | None = None     # on a resume its first epoch runs every CI test again
        for k in (step - first for step in todo):
            start = time.perf_counter()
            clock = StepClock()
            seed = config.seed * 1000 + k
            nodes, r = rows.with_scores((trainer.train_scores() if boosted                          # step 1
                                         else trainer.train_scores(scoring_rows(config)))
                                        .astype(np.float32, copy=False))
            clock.lap("score")
            graph, reuse = once(lambda nodes=nodes, reuse=reuse:                                      # step 2
                                self.graph(nodes, features, config, client, rows.graph_rows, reuse))
            graph.meta["epoch"] = k
            biases = identify_biases(graph).without(separable.set_aside)                        # step 3
            clock.lap("graph")
            with torch_threads(config.bal.cpu_threads):                      # small networks: few CPU threads
                weights, weight_info, state.estimators = self.weights(nodes, biases, kinds, n_categories, config,  # 4
                                                                      seed, state.estimators, device, once, ranks)
                clock.lap("weights")
                click_model, cm_stats = self.click_model(r, nodes, weights, biases, kinds, n_categories,  # step 5
                                                         config, seed, trainer.generator, rows.pairs_at, device,
                                                         ranks)
                page_logits = click_model.page_logits(nodes)                # v(x): a constant of the ranker step
                cm_stats["examination"] = examination_table(click_model, r, page_logits, weights, rows)  # + intervals
                cm_stats["examination_by_position"] = examination_by_position(cm_stats["examination"])
                clock.lap("click_model")
            reweighted = LOSSES[config.train.loss].per_list          # a click-reweighting ranker step
            lambdarank, pair_weights = LOSSES[config.train.loss].boosted_only, config.bal.pair_weights  # a booster's
            skip = None
            if lambdarank and pair_weights != "click":
                skip = skipped_irrelevance(click_model.relevance_logits(r, page_logits, rows.clicks, weights,
                                                                        rows.pairs_at()), page_logits)
            if reweighted:
                weights = click_side_weights(config.train.loss, pair_weights, weights, page_logits,
                                             config.bal.weights.max_weight)
            if boosted:                                                                         # step 6
                stats = self.boost_ranker(trainer, click_model, page_logits, weights, config.train.loss, skip)
            elif reweighted:                                                # listwise: lambdarank is the booster's
                extras = {WEIGHTS: trainer.per_row(weights.astype(np.float32, copy=False))}
                del weights                                                 # the step reads the float32 copy
                step = click_loss_named(config.train.loss)                  # each click keeps its weight ω
                stats = trainer.epoch(lambda s, b, step=step: step.weighted(s, b.clicks, b.mask, b.extras[WEIGHTS]),
                                      extras, lambda b, step=step: step.weighted_normaliser(b.clicks, b.mask,
                                                                                            b.extras[WEIGHTS]))
            else:
                extras = {WEIGHTS: trainer.per_row(weights.astype(np.float32, copy=False)),
                          PAGE_LOGITS: trainer.per_row(page_logits.astype(np.float32, copy=False))}
                del weights                                                 # the step reads the float32 copy
                stats = trainer.epoch(lambda s, b, click_model=click_model: ranker_loss(
                    click_model, s, b.extras[PAGE_LOGITS], b.clicks, b.extras[WEIGHTS], b.mask), extras)
            clock.lap("ranker")
            graphs.append(graph)
            trainer.record(len(trainer.history), {**stats, **cm_stats}, time.perf_counter() - start, phase=GRAPH_EPOCH,
                           bal_epoch=k, biases=biases.to_dict(), weights=weight_info, step_seconds=clock.laps,
                           graph_edges=[f"{e.source} {e.arrow()} {e.target}" for e in graph.edges])
        ranker = trainer.finish()
        bias = {"method": self.name, "graph_mode": config.bal.graph, "features": [f.name for f in features],
                "best_epoch": trainer.best_epoch, "click_model_form": config.bal.click_model.form,
                "backbone": config.ranker.backbone, "document_effects": rows.document_effects,
                "separability": separable.to_dict(),
                "epochs": [{"epoch": e["bal_epoch"], "biases": e["biases"], "weights": e["weights"],
                            "examination_by_position": e["train"].get("examination_by_position")}
                           for e in trainer.history if is_graph_epoch(e)]}
        return FitResult(ranker, trainer.history, bias, graphs)

    # ----------------------------------------------------------------------------------------
    @staticmethod
    def booster_trainer(train: pd.DataFrame, valid: pd.DataFrame | None, config: RunConfig) -> Any:
        """The LightGBM backbone's trainer; an empty booster scores every result alike, so it needs a warm-up first."""
        if config.train.warmup_epochs < 1:
            raise ConfigError("train.warmup_epochs: BAL with ranker.backbone 'lightgbm' needs >= 1 (an empty booster "
                              "gives every result the same r̂, leaving discovery nothing to test), got "
                              f"{config.train.warmup_epochs}")
        return BoostingTrainer(train, valid, config)

    @staticmethod
    def boost_ranker(trainer: Any, click_model: ClickModel, page_logits: np.ndarray,
                     weights: np.ndarray, loss: str = "pointwise", skip: np.ndarray | None = None) -> dict[str, float]:
        """Step 6 for the LightGBM backbone: rounds_per_epoch trees on the blocked, weighted likelihood of Eq. 10.

        The objective's only variable is r̂: α, β of the relevance term and the page logits v(x) are this
        epoch's constants (`losses.boosted.bal_click_grad_hess`), the importance weights multiply each row.
        Listwise (`train.loss`), `weights` are already `listwise_click_weights` and the objective is the
        IPW softmax over each session (`losses.boosted.weighted_softmax_grad_hess`); lambdarank, LambdaMART's
        λ-gradients with each clicked-over-skipped pair weighted by its click's `weights` (`click_side_weights`:
        ω = w/σ(v), as Unbiased LambdaMART weights a pair by its click's inverse propensity, w, or 1) times, with
        `skip` (`bal.pair_weights` other than click), its skipped result's chance of having been skipped for
        irrelevance.
        """
        if LOSSES[loss].boosted_only:                   # LambdaMART's λ-gradients
            order = trainer.in_dataset_order
            return trainer.boost(*trainer.lambda_objective(order(np.asarray(weights, np.float64)),
                                                           None if skip is None else order(skip)))
        if LOSSES[loss].per_list:                       # the IPW softmax over each session
            omega, c, sizes = (trainer.in_dataset_order(np.asarray(weights, np.float64)), trainer.clicks,
                               trainer.group_sizes)
            step = click_loss_named(loss)
            return trainer.boost(lambda f: step.weighted_grad_hess(f, c, sizes, omega),
                                 lambda f: step.weighted_total(f, c, sizes, omega))
        alpha, beta = click_model.relevance_affine()
        v = trainer.in_dataset_order(np.asarray(page_logits, np.float64))
        w = trainer.in_dataset_order(np.asarray(weights, dtype=np.float64))
        c, form = trainer.clicks, click_model.form
        return trainer.boost(lambda f: boosted_losses.bal_click_grad_hess(f, v, c, w, alpha, beta, form),
                             lambda f: boosted_losses.bal_click_loss(f, v, c, w, alpha, beta, form))

    @staticmethod
    def graph(nodes: NodeColumns | pd.DataFrame, features: Sequence[PageFeature], config: RunConfig, client: Any,
              rows: GraphRows | None, reuse: ReusableTests | None = None,
              ) -> tuple[DiscoveredGraph, ReusableTests | None]:
        """This epoch's click-model graph: discovered on the sampled `rows` (`rows.GraphRows`), or the variant's
        fixed one.

        Every epoch reads the same rows, so the graph moves only with r̂ and each epoch re-runs only the CI
        tests that involve r̂: the others' p-values (`reuse`, from the previous epoch) cannot have changed.
        Bootstrap stabilities come from `bal.graph_bootstrap` resamples (`discovery.n_bootstrap` serves
        `wpultr discover`).
        """
        if rows is None:                                  # a fixed-graph variant (`bal.graph`): nothing sampled
            return fixed_graph(config.bal.graph, features), None
        d = replace(config.discovery, n_bootstrap=config.bal.graph_bootstrap)
        result = discover(nodes.iloc[rows.kci].reset_index(drop=True), features, d, client=client,
                          seed=discovery_seed(config), click_nodes=rows.click_frame(nodes), reuse=reuse)
        graph = result.graph
        graph.meta["sample"] = {**graph.meta.get("sample", {}), "n_sessions_requested": d.n_sessions,
                                "stratified": d.stratify, "rows_per": "one displayed result per sampled session",
                                "same_rows_every_epoch": True}
        return graph, result.reusable_p_values()

    @staticmethod
    def click_model(r: np.ndarray, nodes: NodeColumns | pd.DataFrame, weights: np.ndarray, biases: BiasReport,
                    kinds: dict[str, str], n_categories: dict[str, int], config: RunConfig, seed: int,
                    generator: Any, pairs_at: Callable[[np.ndarray], np.ndarray | None] | None = None,
                    device: torch.device | None = None, ranks: Any = None) -> tuple[ClickModel, dict[str, float]]:
        """φ_c fitted by the weighted likelihood of Eq. 10 over the page parents of c, on at most max_rows rows of
        `nodes` (c read from its column); with `pairs_at` (the rows' `document_pairs` codes at given positions,
        `TrainingRows.pairs_at`), u has a per-(query, document) offset during the fit. It fits and stays on
        `device` (the training device; None: the CPU), where the ranker step reads it."""
        click_parents = [p for p in biases.click_parents if p != RELEVANCE_SCORE]
        with torch.random.fork_rng(devices=[]):     # its initial weights from the epoch's seed, never from the
            torch.manual_seed(seed)                  # global stream (a booster run never seeds that one)
            model = ClickModel(page_inputs(click_parents, kinds, n_categories), config.bal.click_model)
        model.to(device or "cpu")                    # drawn on the CPU, then moved: the same initial weights
        rows = click_model_rows(len(nodes), config.bal.click_model.max_rows, seed)
        chosen = nodes.iloc[rows]
        pairs = None if pairs_at is None else pairs_at(rows)
        fit_pairs = None if pairs is None else np.unique(pairs, return_inverse=True)[1]
        stats = model.fit(r[rows], chosen, chosen[CLICK].to_numpy(copy=True), weights[rows], generator, fit_pairs,
                          ranks)
        return model, stats

    @staticmethod
    def weights(nodes: NodeColumns | pd.DataFrame, biases: BiasReport, kinds: dict[str, str],
                n_categories: dict[str, int], config: RunConfig, seed: int,
                previous: dict[str, FeatureInfluence] | None = None, device: torch.device | None = None,
                once: Callable[[Callable[[], Any]], Any] | None = None, ranks: Any = None,
                ) -> tuple[np.ndarray, dict[str, Any], dict[str, FeatureInfluence]]:
        """Importance weights of every row (1 where nothing is confounded), their diagnostics and the estimators.

        The estimators are fitted on the same `bal.estimator_rows` rows every epoch (drawn by the run's seed)
        and warm-started from `previous` (`bal.influence.warm_start`): only r̂ changed since. They fit and run on
        `device` (the training device) under `bal.influence.device: train`, the default. `once` runs the fit (in DDP
        ranks: on rank 0, its estimators sent to every rank); with `ranks` each rank applies them to its share of
        the rows' chunks (`importance_weights`).
        """
        if not biases.confounded:
            return np.ones(len(nodes)), {"confounded": [], "ess_fraction": 1.0}, {}
        n_fit = min(config.bal.estimator_rows, len(nodes))
        fit_rows = np.sort(np.random.default_rng([config.seed, 11]).choice(len(nodes), size=n_fit, replace=False))
        clock = StepClock()
        estimators = (once or (lambda fit: fit()))(lambda: fit_influence_estimators(
            nodes.iloc[fit_rows].reset_index(drop=True), biases, {k: FeatureKind(v) for k, v in kinds.items()},
            config.bal.influence, seed, n_categories, previous=previous, device=device))
        clock.lap("fit")
        result = importance_weights(nodes, estimators, config.bal.weights, seed, keep_feature_log_weights=False,
                                    ranks=ranks)
        clock.lap("apply")
        info = result.to_dict()
        info["seconds"] = clock.laps
        info["confounded"] = [c.feature for c in biases.confounded]
        info["estimators"] = {name: est.to_dict() for name, est in estimators.items()}
        return result.weights, info, estimators
