// A model built in code from Tandem's layers and handed to the trainer: a 3-layer GELU classifier with
// a LayerNorm, trained on the synthetic teacher data. Run: build/release/examples/custom_model [OUT_DIR]
#include <cstdio>
#include <memory>

#include "tandem/config/config.h"
#include "tandem/data/dataset.h"
#include "tandem/layout/layout.h"
#include "tandem/nn/activation.h"
#include "tandem/nn/layernorm.h"
#include "tandem/nn/linear.h"
#include "tandem/train/trainer.h"

int main(int argc, char** argv) {
  using namespace tandem;
  try {
    // 1. The model: an ordered list of layers with unique parameter names.
    nn::Model model;
    model.emplace<nn::Linear>("fc1", 64, 128);
    model.emplace<nn::Activation>("act1", nn::ActivationKind::Gelu);
    model.emplace<nn::LayerNorm>("norm", 128);
    model.emplace<nn::Linear>("fc2", 128, 128);
    model.emplace<nn::Activation>("act2", nn::ActivationKind::Gelu);
    model.emplace<nn::Linear>("classifier", 128, 10);

    // 2. The training settings, with the same keys as a JSON config file. The "model" object only tells
    //    the data what shapes to produce; the model itself is the one built above.
    config::Json cfg = {{"train_batch_size", 128},
                        {"train_micro_batch_size_per_gpu", 64},
                        {"steps", 50},
                        {"steps_per_print", 10},
                        {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 2e-3}}}}},
                        {"model", {{"type", "mlp"}, {"sizes", {64, 10}}}},
                        {"data", {{"type", "synthetic"}}}};
    const config::TrainConfig tc = config::parse(config::validate(cfg), 1);

    // 3. The data: synthetic classification with 64 features and 10 classes.
    spec::ModelIO io;
    io.features = 64;
    io.classes = 10;
    auto dataset = data::make_dataset(tc.data, io, tc.seed);

    // 4. Train.
    train::TrainOptions options;
    options.out_dir = argc > 1 ? argv[1] : "";
    // One process: the layout the "parallel" object asks of a world of one (here none: one device).
    const layout::ParallelPlan plan = layout::resolve_parallel(tc.parallel, 1);
    train::Trainer trainer(tc, plan, std::move(model), std::move(dataset), options);
    const auto history = trainer.run();
    std::printf("loss %.4f -> %.4f\n", history.front().loss, history.back().loss);
    return history.back().loss < history.front().loss ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
