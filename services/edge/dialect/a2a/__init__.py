"""Agent-to-agent sessions at the edge: the session tools' methods, runner and views.

The session tools' extension methods (:mod:`.methods`), the runner of spawned and
sent-to sessions (:mod:`.runner`) and the views the tools and session/list show
(:mod:`.views`)."""
