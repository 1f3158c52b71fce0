"""Batches go into transformers' time-series models as they are."""

from __future__ import annotations

import torch

from tests.datamodules.time_series.series_data import frame_datamodule, long_frame


def test_a_list_target_batch_gives_patchtst_a_loss_without_reshaping() -> None:
    from transformers import PatchTSTConfig, PatchTSTForPrediction

    frame = long_frame()
    frame["double"] = 2 * frame["value"]
    dm = frame_datamodule(frame, target=["value", "double"], context_length=8, batch_size=4)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    config = PatchTSTConfig(
        num_input_channels=2, context_length=8, prediction_length=3, patch_length=4,
        patch_stride=4, d_model=8, num_attention_heads=2, num_hidden_layers=1, ffn_dim=8,
    )  # fmt: skip
    torch.manual_seed(0)
    model = PatchTSTForPrediction(config)
    out = model(
        past_values=batch["past_values"],
        past_observed_mask=batch["past_observed_mask"],
        future_values=batch["future_values"],
    )
    assert out.loss.ndim == 0 and torch.isfinite(out.loss)
    out.loss.backward()
    assert out.prediction_outputs.shape == batch["future_values"].shape


def test_a_batch_gives_time_series_transformer_a_loss() -> None:
    from transformers import TimeSeriesTransformerConfig, TimeSeriesTransformerForPrediction

    dm = frame_datamodule(context_length=8, batch_size=4)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    config = TimeSeriesTransformerConfig(
        prediction_length=3, context_length=8, lags_sequence=[1],
        num_time_features=len(dm.time_feature_names), num_static_categorical_features=1,
        cardinality=dm.cardinalities, embedding_dimension=[2], num_static_real_features=1,
        d_model=8, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=8, decoder_ffn_dim=8,
        # The lags need one step before the context: the batch's context is all of it.
    )  # fmt: skip
    config.context_length = 8 - max(config.lags_sequence)
    model = TimeSeriesTransformerForPrediction(config)
    keys = ("past_values", "past_time_features", "past_observed_mask", "future_values",
            "future_time_features", "future_observed_mask", "static_categorical_features",
            "static_real_features")  # fmt: skip
    out = model(**{key: batch[key] for key in keys})
    assert torch.isfinite(out.loss)
