"""Architecture diagrams drawn from the synthesized templates of each blueprint (`make diagrams`).

`model` turns a blueprint's templates into a graph, `dot` writes it as Graphviz DOT, `__main__` synthesizes
every blueprint and writes `docs/diagrams/<name>.{dot,svg,png}` plus `docs/blueprints.md`.
"""
