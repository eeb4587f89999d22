"""Where the model comes from: the random models the project builds, the model it trains from packaged data,
the tokenizer files both need, and the real model by hub name or local path."""
