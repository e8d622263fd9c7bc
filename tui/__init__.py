"""The UI over the engine: the headless CLI (cli/) and the Textual app (app/), which never
import each other but through the CLI's two doors into the app; cells.py is what both
show.
"""
