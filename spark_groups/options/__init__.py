"""The options of the sources and the sink, checked where the query is defined.

Names, defaults, parsing and validation, so a bad option fails ``load()`` or ``start()``:

* :mod:`~spark_groups.options.source`: the ``kafka-group`` source's options
  (``SourceOptions``, ``parse_options``), the member's and readers' librdkafka configs;
  its names that other packages use are importable from here;
* :mod:`~spark_groups.options.share`: the experimental ``kafka-share`` source's options
  (``ShareOptions``);
* :mod:`~spark_groups.options.formats`: both sources' record formats (``key.format``,
  ``value.format``, ``schema.registry.*``: ``FormatOptions``);
* :mod:`~spark_groups.options.sink`: the ``delta-group`` sink's options (``SinkOptions``);
* :mod:`~spark_groups.options.values`: one option's value parsed (a boolean, a duration,
  topics, a path...), the error naming the option; shared by the sources' options.
"""

from spark_groups.options.source import (
    READ_PATHS,
    SourceOptions,
    history_path,
    in_flow_checkpoint,
    parse_options,
    validate_client_config,
)

__all__ = [
    "READ_PATHS",
    "SourceOptions",
    "history_path",
    "in_flow_checkpoint",
    "parse_options",
    "validate_client_config",
]
