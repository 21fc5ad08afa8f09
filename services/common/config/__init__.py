"""acpgate configuration: ``<config dir>/config.toml``, env overrides, CLI flags.

Precedence, highest first: CLI flags > ``ACPGATE_<section>__<key>`` environment
variables > ``config.toml`` > defaults (SPEC §0). The schema is the single
description of every key: its type, its default and its check. Loading never
raises anything but :class:`ConfigError`, whose message names the file, the key
and the expected type, so the CLI can print it instead of a traceback.

Agent entries live in ``[agents.<alias>]`` tables; their environment overrides
are ``ACPGATE_agents__<alias>__<key>``.

One job per module; this package re-exports the public names of all four:

- :mod:`.schema`: the sections, :class:`Config`; each field declared with
  :func:`.setting.setting` (meaning, bounds, choices, reload), the checks a bound cannot
  express in :mod:`.checks`, the fixed sets in :mod:`.choices`;
- :mod:`.coerce`: checking (and parsing env/CLI text into) a value of the schema;
- :mod:`.load`: the config dir, the first-run default file, the precedence;
- :mod:`.edit`: ``acpgate config set/get/show`` and ``agents add``'s table, with tomlkit.

(:mod:`.reload` — which keys a running process applies on reload, which need a restart —
is imported from its module.)
"""

from services.common.config.choices import (
    AGENT_KINDS,
    AUTONOMY_LEVELS,
    PROVIDERS,
    VISIBILITY_LEVELS,
)
from services.common.config.edit import add_agent_section, get_value, set_value, show
from services.common.config.load import (
    DEFAULT_CONFIG_TOML,
    ENV_CONFIG_DIR,
    ENV_PREFIX,
    ensure_default_config,
    load_config,
    resolve_config_dir,
    with_overrides,
)
from services.common.config.schema import (
    CONFIG_FILE_NAME,
    DEFAULT_AUTO_APPROVE,
    DEFAULT_FORBIDDEN_PATHS,
    A2aSection,
    AcpSection,
    AgentSection,
    AutonomySection,
    Config,
    ConfigError,
    GatewaySection,
    LifecycleSection,
    LoggingSection,
    PathsSection,
    ServicesSection,
    SessionsSection,
    StoreSection,
    TlsSection,
)

__all__ = [
    "AGENT_KINDS",
    "AUTONOMY_LEVELS",
    "CONFIG_FILE_NAME",
    "DEFAULT_AUTO_APPROVE",
    "DEFAULT_CONFIG_TOML",
    "DEFAULT_FORBIDDEN_PATHS",
    "ENV_CONFIG_DIR",
    "ENV_PREFIX",
    "PROVIDERS",
    "VISIBILITY_LEVELS",
    "A2aSection",
    "AcpSection",
    "AgentSection",
    "AutonomySection",
    "Config",
    "ConfigError",
    "GatewaySection",
    "LifecycleSection",
    "LoggingSection",
    "PathsSection",
    "ServicesSection",
    "SessionsSection",
    "StoreSection",
    "TlsSection",
    "add_agent_section",
    "ensure_default_config",
    "get_value",
    "load_config",
    "resolve_config_dir",
    "set_value",
    "show",
    "with_overrides",
]
