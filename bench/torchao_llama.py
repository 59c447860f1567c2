"""The Llama baseline in float8: the reference script (pytorch_llama.py, transformers' LlamaForCausalLM) with torchao's
float8 training applied to every linear layer of the decoder (lm_head stays in bf16, as Tandem's head), the recipe
named by --float8-recipe (default tensorwise: dynamic per-tensor scales). The reference script does everything else
(shapes, --micro/--accum, --compile of each decoder layer, timing, the RESULT line).

  torchrun --standalone --nproc_per_node=1 torchao_llama.py PYTORCH_LLAMA_SCRIPT [--float8-recipe R] ARGS...
"""
import importlib.util
import sys


def main():
    script = sys.argv[1]
    args = sys.argv[2:]
    recipe = "tensorwise"
    if "--float8-recipe" in args:
        i = args.index("--float8-recipe")
        recipe = args[i + 1]
        del args[i:i + 2]
    import transformers
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    base = transformers.LlamaForCausalLM
    config = Float8LinearConfig.from_recipe_name(recipe)

    class Float8LlamaForCausalLM(base):
        def __init__(self, cfg):
            super().__init__(cfg)
            # torchao's float8 linear takes dims divisible by 16; every projection of these shapes is.
            convert_to_float8_training(self, config=config, module_filter_fn=lambda m, fqn: "lm_head" not in fqn)

    transformers.LlamaForCausalLM = Float8LlamaForCausalLM
    spec = importlib.util.spec_from_file_location("pytorch_llama", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.argv = [script] + args
    module.main()


if __name__ == "__main__":
    main()
