-- Placements made below the capacity threshold under the best_available fallback policy.
ALTER TABLE placements ADD COLUMN fallback boolean NOT NULL DEFAULT false;
