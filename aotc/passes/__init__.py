"""Module -> Module rewrites and the pipeline that orders them."""
