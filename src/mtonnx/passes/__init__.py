"""Pure graph rewrites (ModelProto -> ModelProto, in place), each kept only if it keeps the tokens: the lm_head
untie, the key-transpose fold, the cross K/V extraction, the tuned step, and the shared weights file."""
