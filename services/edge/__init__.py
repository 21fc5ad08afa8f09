"""The edge: the only component that speaks ACP.

Its parts, top to bottom: ``transport`` (the stdio and WebSocket front doors, the
bridge), ``dialect`` (what each method does, relaying included), ``sessions`` (the live
sessions), ``adapter`` (the ACP client of each adapter) and ``ports`` (the way back to the
client); each imports only the parts below it and the edge-wide modules.
"""
