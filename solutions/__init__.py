"""Reference implementations: one module per stage, plus the code later stages share
(`solutions.tokenizer`, `solutions.gpt`). Solutions import only earlier stages and the
shared modules, always absolutely (`from solutions.autograd import Tensor`)."""
