"""One APIRouter per resource; `app.py` assembles them."""
